"""scripts/gpu_bundle.py: which distributions the GPU machine's wheel bundle carries, from requirement metadata."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def load_bundle() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bundle"] = module
    spec.loader.exec_module(module)
    return module


bundle = load_bundle()
PY312 = bundle.target_environment("3.12")
# a small world of Requires-Dist lines, shaped like the real ones
REQUIRES = {
    "app": ['web; extra == "server"', 'agentlib; extra == "agent"', "base"],
    "web": ["base>=1", 'backport; python_version < "3.11"', 'winonly; sys_platform == "win32"', "grpcio"],
    "agentlib": ['server-speedups; extra == "standard"'],
    "base": [],
    "grpcio": [],
    "backport": [],
    "winonly": [],
    "server-speedups": ["numpy"],
    "numpy": [],
}


def requires(name: str) -> list[str]:
    return REQUIRES[name]


@pytest.mark.parametrize(
    ("roots", "expected"),
    [
        (["app"], {"app", "base"}),
        (["app[server]"], {"app", "base", "web", "grpcio"}),
        (["app[server,agent]"], {"app", "base", "web", "grpcio", "agentlib"}),
        (["app[agent]", "agentlib[standard]"], {"app", "base", "agentlib", "server-speedups", "numpy"}),
    ],
)
def test_the_closure_follows_extras_and_target_markers(roots: list[str], expected: set[str]) -> None:
    assert set(bundle.closure(roots, requires, PY312)) == expected


def test_a_marker_is_judged_for_the_target_python_not_the_builder() -> None:
    old = bundle.closure(["web"], requires, bundle.target_environment("3.10"))
    assert "backport" in old and "backport" not in bundle.closure(["web"], requires, PY312)


def test_extras_asked_later_still_walk_their_requirements() -> None:
    assert "numpy" in bundle.closure(["agentlib", "agentlib[standard]"], requires, PY312)


def test_the_plan_leaves_out_the_image_and_the_project_but_carries_version_checked_runtimes() -> None:
    needed = bundle.closure(["app[server,agent]"], requires, PY312)
    pins = bundle.plan(needed, frozenset({"base", "grpcio"}), lambda name: "1.0", project="app")
    assert [p.name for p in pins] == ["agentlib", "grpcio", "web"]
    assert pins[2].why == "app[server,agent] → web" and pins[2].spec() == "web==1.0"


def test_the_image_list_reads_canonical_names() -> None:
    image = bundle.read_image()
    assert {"torch", "nvidia-ml-py", "prometheus-client", "typing-extensions"} <= image
    assert "fastapi" not in image and "sqlalchemy" not in image


def test_this_projects_bundle_carries_the_server_stack_and_not_torch() -> None:
    """The real metadata of this environment: what the GPU machine lacks is carried, what it has is not."""
    needed = bundle.closure(bundle.ROOTS, bundle.installed_requires, PY312)
    pins = {p.name for p in bundle.plan(needed, bundle.read_image(), lambda name: "0", project="fleetpilot")}
    assert {"fastapi", "starlette", "uvicorn", "pydantic", "pydantic-core", "sqlalchemy", "alembic"} <= pins
    assert {"grpcio", "protobuf"} <= pins
    assert not pins & {"torch", "numpy", "scipy", "nvidia-ml-py", "fleetpilot"}
    assert all(Requirement(f"{name}==0") for name in pins)
