"""The image recipe the manifests run: it copies every package the distribution ships, and its entrypoint takes the
manifests' arguments. (No container runtime here or in CI: the image itself is not built in the tests.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_image_copies_every_shipped_package_and_runs_fleetpilot() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, flags=re.MULTILINE))
    assert {name.rstrip("*") for name in shipped} <= copied
    assert 'ENTRYPOINT ["fleetpilot"]' in dockerfile
    assert re.search(r"pip install --no-cache-dir \"\.\[server,agent,workload\]\"", dockerfile)
    for manifest in ("server-deployment.yaml", "db-upgrade-job.yaml", "agent-daemonset.yaml"):
        assert "ghcr.io/fleetpilot/fleetpilot:0.1.0" in (ROOT / "deploy" / "kubernetes" / manifest).read_text()
