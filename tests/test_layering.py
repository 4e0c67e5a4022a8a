"""Rooms import downward only (docs/architecture.md, "Rooms"): each room's modules are parsed and every import of
one of our rooms above it is a failure naming the module and the import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each room and the rooms it may import; a room not named here (a third-party package, the stdlib) is not checked.
ALLOWED: dict[str, set[str]] = {
    "wire": set(),
    "collector": {"wire"},
    "fleet": {"wire", "collector"},
    "predictor": {"wire", "collector", "fleet"},
    "autoscaler": {"wire", "collector", "fleet", "predictor"},
    "isolation": {"wire", "collector", "fleet"},
    # alerting reads isolation's events from the side; the scaling log it reads is fleet's (fleet/scaling_log.py)
    "alerting": {"wire", "collector", "fleet", "predictor", "isolation"},
    "inference_agent": {"wire"},  # the node daemon needs none of the server's rooms
    "web": {"wire", "collector", "fleet", "predictor", "autoscaler", "isolation", "alerting"},
    "replay": {"wire", "predictor"},  # a client of the agents' serving API: the demand series are the predictor's
    # the demo runs the whole system through the composition root's launch helpers and settings
    "demo": {"wire", "collector", "fleet", "predictor", "autoscaler", "isolation", "alerting", "inference_agent", "web"}
    | {"migrations", "fleetpilot", "replay"},
}
ROOMS = {*ALLOWED, "fleetpilot", "migrations", "bench"}


def imports_of(path: Path) -> set[str]:
    """The top-level packages a module imports (absolute imports only; a relative one stays in its room)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def upward_imports(room: str) -> list[str]:
    allowed = ALLOWED[room] | {room}
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / room).rglob("*.py"))
        for name in sorted(imports_of(path) & ROOMS - allowed)
    ]


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_a_room_imports_only_the_rooms_below_it(room: str) -> None:
    assert upward_imports(room) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from autoscaler.policy import Decision\nimport wire.catalog\n")
    assert imports_of(module) == {"autoscaler", "wire"}
