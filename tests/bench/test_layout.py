"""Benchmarks share ``bench.lib`` and never each other: every ``bench/NAME.py`` is a benchmark (``python -m
bench.NAME``) importing only the library and the product, and the library imports no benchmark."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
BENCHMARKS = sorted(p for p in BENCH.glob("*.py") if p.name != "__init__.py")
LIBRARY = sorted((BENCH / "lib").rglob("*.py"))


def bench_imports(path: Path) -> set[str]:
    """The ``bench.*`` modules a module imports (``from bench.lib import x`` counts as ``bench.lib.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= (
                {f"{node.module}.{alias.name}" for alias in node.names} if node.module == "bench.lib" else {node.module}
            )
    return {name for name in found if name == "bench" or name.startswith("bench.")}


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_runs_as_a_module_and_imports_only_the_library(path: Path) -> None:
    assert 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
    assert {name for name in bench_imports(path) if not name.startswith("bench.lib.")} == set()


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_the_library_imports_no_benchmark(path: Path) -> None:
    assert {name for name in bench_imports(path) if not name.startswith("bench.lib")} == set()
