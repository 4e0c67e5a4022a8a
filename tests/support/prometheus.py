"""Real Prometheus tools for tests: ``promtool check metrics`` and a ``prometheus`` server scraping one target.

Both come from the Debian package ``prometheus``; without them a test skips with the reason (fails under CI=true).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fleetpilot.launch import ChildProcess, free_port
from tests.support.availability import unavailable


def require_program(name: str) -> str:
    """The path of ``name`` on PATH, or a skip (a failure under CI=true) naming the package that provides it."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} not found on PATH (install the Debian package prometheus)")
    return path


@dataclass(frozen=True)
class PromtoolVerdict:
    returncode: int
    output: str

    @property
    def clean(self) -> bool:
        return self.returncode == 0 and not self.output.strip()


def promtool_check_metrics(exposition: bytes) -> PromtoolVerdict:
    """Run ``promtool check metrics`` over an exposition on stdin; ``output`` is what it printed (stdout+stderr)."""
    completed = subprocess.run(
        [require_program("promtool"), "check", "metrics"],
        input=exposition,
        capture_output=True,
        timeout=30,
        check=False,
    )
    output = (completed.stdout + completed.stderr).decode(errors="replace")
    return PromtoolVerdict(completed.returncode, output)


def scrape_config(target: str, *, job: str, scrape_interval_s: float) -> str:
    """A minimal prometheus.yml scraping ``target`` (host:port) at ``/metrics``."""
    interval = f"{scrape_interval_s:g}s"
    return (
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  scrape_timeout: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        "    metrics_path: /metrics\n"
        "    static_configs:\n"
        f'      - targets: ["{target}"]\n'
    )


@dataclass(kw_only=True)
class PrometheusProcess(ChildProcess):
    """``with PrometheusProcess(workdir=..., target="127.0.0.1:8080") as prometheus:`` runs a throwaway Prometheus.

    Config, TSDB and log live under ``workdir``; the context exit always terminates and reaps the process.
    """

    workdir: Path
    target: str
    job: str = "fleetpilot"
    scrape_interval_s: float = 1.0
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "prometheus.log"
        self.cwd = self.workdir
        config = self.workdir / "prometheus.yml"
        config.write_text(scrape_config(self.target, job=self.job, scrape_interval_s=self.scrape_interval_s))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            require_program("prometheus"),
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def ready_url(self) -> str:
        return f"{self.url}/-/ready"

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector of ``promql`` now: ``[{"metric": {labels}, "value": [ts, "value"]}, ...]``."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5.0)
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with ``health`` and ``lastError``: what to show when a scrape goes wrong."""
        response = httpx.get(f"{self.url}/api/v1/targets", timeout=5.0)
        response.raise_for_status()
        active: list[dict[str, Any]] = response.json()["data"]["activeTargets"]
        return active
