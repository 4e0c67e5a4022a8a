"""The house stays small enough to hold in one's head (docs/architecture.md, "Rooms"): no module of the product's
rooms over 400 lines, and at most three functions over 60 lines in all of them. Generated code (``*_pb2*.py``) and
migrations aside."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layering import ALLOWED, ROOT

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 3
PRODUCT_ROOMS = sorted({*ALLOWED, "fleetpilot"})


def product_modules() -> list[Path]:
    return [path for room in PRODUCT_ROOMS for path in sorted((ROOT / room).rglob("*.py")) if "_pb2" not in path.name]


def long_functions(path: Path) -> list[str]:
    """Each function over 60 lines (nested ones too), named with its place."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_module_is_over_400_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)} ({lines} lines)"
        for path in product_modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert too_long == []


def test_at_most_three_functions_are_over_60_lines() -> None:
    found = [entry for path in product_modules() for entry in long_functions(path)]
    assert len(found) <= MAX_LONG_FUNCTIONS, "\n".join(found)


def test_the_measure_sees_a_long_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n" + "    x = 1\n" * 70)
    assert len(long_functions(module)) == 1
