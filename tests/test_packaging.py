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
