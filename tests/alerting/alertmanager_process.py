"""A throwaway real Alertmanager (Debian package ``prometheus-alertmanager``) on loopback, for the sink's test.

Without the program the test skips with the reason (and fails under CI=true, where .ci/run installs it).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fleetpilot.launch import ChildProcess
from inference_agent.ports import free_port
from tests.support.availability import unavailable

PROGRAM = "prometheus-alertmanager"
CONFIG = """route:
  receiver: "nowhere"
  group_wait: 1s
receivers:
  - name: "nowhere"
"""


def alertmanager_program() -> str:
    path = shutil.which(PROGRAM) or shutil.which("alertmanager")
    if path is None:
        unavailable(f"{PROGRAM} not found on PATH (install the Debian package prometheus-alertmanager)")
    return path


@dataclass(kw_only=True)
class AlertmanagerProcess(ChildProcess):
    workdir: Path
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "alertmanager.log"
        (self.workdir / "alertmanager.yml").write_text(CONFIG)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            alertmanager_program(),
            f"--config.file={self.workdir / 'alertmanager.yml'}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",  # one instance: no gossip port
        ]

    def ready_url(self) -> str:
        return f"{self.url}/-/ready"

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts Alertmanager holds (``GET /api/v2/alerts``)."""
        response = httpx.get(f"{self.url}/api/v2/alerts", timeout=5.0)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()
        return found
