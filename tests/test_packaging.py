"""`pip install fleetpilot[agent]` stays light: the agent's code runs without the server's dependencies."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_ONLY = (
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "apscheduler",
    "statsmodels",
    "sklearn",
    "kubernetes",
    "msgspec",  # ingest's JSON decoder; the agent builds its compact batches with the standard library
)


def test_the_agent_extra_pulls_no_server_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    light = " ".join(project["dependencies"] + project["optional-dependencies"]["agent"]).lower()
    for name in (*SERVER_ONLY, "scikit-learn", "torch"):
        assert name not in light


def test_the_agent_imports_and_builds_its_probes_without_server_packages_or_torch(tmp_path: Path) -> None:
    # Mapping a module to None in sys.modules makes importing it fail, as if it were not installed.
    code = "\n".join(
        [
            "import sys",
            *(f"sys.modules[{name!r}] = None" for name in (*SERVER_ONLY, "torch")),
            "from fleetpilot.cli import build_parser",
            "from inference_agent.daemon import open_probes",
            "from inference_agent.settings import AgentSettings",
            f"s = AgentSettings(collector='http://c', token='agent-token', spool_dir={str(tmp_path)!r})",
            "open_probes(s).close()",
            "build_parser()",
        ]
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_the_licence_is_an_spdx_string_that_the_pinned_setuptools_reads_without_warnings() -> None:
    """``license = {text = ...}`` warned three times on every install (setuptools deprecates the table from 77 on,
    which is also the first release that reads the SPDX string: the build requirement says so)."""
    import warnings

    from setuptools.config.pyprojecttoml import apply_configuration  # type: ignore[import-untyped]
    from setuptools.dist import Distribution  # type: ignore[import-untyped]

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert not any("License ::" in c for c in pyproject["project"].get("classifiers", []))
    assert "setuptools>=77" in pyproject["build-system"]["requires"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message) for w in caught if "licen" in str(w.message).lower()] == []
    assert dist.metadata.license_expression == "Apache-2.0"
