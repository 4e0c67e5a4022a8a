"""Real Prometheus tools for tests: ``promtool check metrics`` / ``check config`` and a ``prometheus`` server that
scrapes targets and, given a ``RemoteWrite``, remote-writes what it scraped.

Both come from the Debian package ``prometheus`` (2.42); without them a test skips with the reason (fails under
CI=true). The TSDB and its WAL live under ``workdir/tsdb``, so ``stop()`` (or ``kill()``) then ``start()`` on the same
``PrometheusProcess`` restarts it on its own data, at the same port.

What Prometheus 2.42 remote-writes, as tests/collector/test_prometheus_remote_harness.py observes it:
- a POST per batch to the URL with ``Authorization: Bearer <token>``, ``Content-Encoding: snappy``, ``Content-Type:
  application/x-protobuf``, ``X-Prometheus-Remote-Write-Version: 0.1.0``, ``User-Agent: Prometheus/2.42.0+ds``: a
  snappy block-compressed ``prometheus.WriteRequest``; the first one about 5 s after start (the WAL watcher's
  start-up), then one per scrape with these settings. Each series carries ``__name__``, the target's labels
  (``instance``, ``job``) and the exposition's labels, less any with an empty value (``container=""`` is not sent),
  sorted by name, with millisecond timestamps; the scrape's own series (``up``, ``scrape_duration_seconds``,
  ``scrape_samples_scraped``, ...) come too. Metric metadata (type, help) comes in separate requests without series,
  every ``metadata_send_interval_s``;
- a 5xx answer is retried, the same batch again (backoff ``min_backoff`` doubling to ``max_backoff``), holding back
  every later sample; a 4xx answer drops the batch and the next one follows;
- after a restart on the same TSDB it does not replay the WAL to the remote end: the watcher of the new process
  sends only samples scraped after it started, so samples that were acknowledged are never sent twice, and samples
  still unsent when the old process went away (the receiver down, or Prometheus killed) are never sent at all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fleetpilot.launch import ChildProcess
from inference_agent.ports import free_port
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
    return _promtool("check", "metrics", stdin=exposition)


def promtool_check_config(config: Path) -> PromtoolVerdict:
    """Run ``promtool check config`` on a prometheus.yml; a valid one exits 0 and says SUCCESS."""
    return _promtool("check", "config", str(config))


def _promtool(*args: str, stdin: bytes | None = None) -> PromtoolVerdict:
    completed = subprocess.run(
        [require_program("promtool"), *args], input=stdin, capture_output=True, timeout=30, check=False
    )
    return PromtoolVerdict(completed.returncode, (completed.stdout + completed.stderr).decode(errors="replace"))


@dataclass(frozen=True)
class RemoteWrite:
    """A ``remote_write`` destination with its queue tuned for tests: a batch leaves within ``batch_send_deadline_s``
    of its first sample, and a refused one is retried after ``min_backoff_s``, doubling up to ``max_backoff_s``."""

    url: str
    bearer_token: str
    batch_send_deadline_s: float = 0.2
    min_backoff_s: float = 0.05
    max_backoff_s: float = 0.5
    metadata_send_interval_s: float = 1.0  # Prometheus' default is 1 min

    def config(self) -> str:
        """The ``remote_write:`` section of prometheus.yml (2.42: ``authorization.credentials`` is the bearer token)."""
        return (
            "remote_write:\n"
            f"  - url: {json.dumps(self.url)}\n"
            "    authorization:\n"
            f"      credentials: {json.dumps(self.bearer_token)}\n"
            "    queue_config:\n"
            f"      batch_send_deadline: {_duration(self.batch_send_deadline_s)}\n"
            f"      min_backoff: {_duration(self.min_backoff_s)}\n"
            f"      max_backoff: {_duration(self.max_backoff_s)}\n"
            "    metadata_config:\n"
            f"      send_interval: {_duration(self.metadata_send_interval_s)}\n"
        )


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def scrape_config(
    target: str | Sequence[str],
    *,
    job: str,
    scrape_interval_s: float,
    remote_write: RemoteWrite | None = None,
    target_labels: Mapping[str, str] | None = None,
) -> str:
    """A minimal prometheus.yml scraping ``target`` (host:port, or several) at ``/metrics``, remote-writing to
    ``remote_write`` when given; ``target_labels`` are added to every series of the targets (a static config's
    ``labels``: how a team names the node of an exporter, ``node: gpu-node-a``)."""
    targets = [target] if isinstance(target, str) else list(target)
    interval = f"{scrape_interval_s:g}s"
    config = (
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  scrape_timeout: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        "    metrics_path: /metrics\n"
        "    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    if target_labels:
        config += f"        labels: {json.dumps(dict(target_labels))}\n"
    return config + (remote_write.config() if remote_write is not None else "")


@dataclass(kw_only=True)
class PrometheusProcess(ChildProcess):
    """``with PrometheusProcess(workdir=..., target="127.0.0.1:8080") as prometheus:`` runs a throwaway Prometheus.

    Config, TSDB (with its WAL) and log live under ``workdir``, which outlives the process: a later ``start()``, or
    another ``PrometheusProcess`` on the same ``workdir``, reopens the same TSDB. The context exit always terminates
    and reaps the process.
    """

    workdir: Path
    target: str | Sequence[str]
    job: str = "fleetpilot"
    scrape_interval_s: float = 1.0
    remote_write: RemoteWrite | None = None
    target_labels: Mapping[str, str] | None = None
    # how long a stopping Prometheus keeps trying to flush unsent samples (its default, 1 min, outlasts ``stop()``)
    remote_flush_deadline_s: float = 1.0
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "prometheus.log"
        self.cwd = self.workdir
        self.config_path.write_text(
            scrape_config(
                self.target,
                job=self.job,
                scrape_interval_s=self.scrape_interval_s,
                remote_write=self.remote_write,
                target_labels=self.target_labels,
            )
        )

    @property
    def config_path(self) -> Path:
        return self.workdir / "prometheus.yml"

    @property
    def tsdb_path(self) -> Path:
        return self.workdir / "tsdb"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            require_program("prometheus"),
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.tsdb_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.remote.flush-deadline={_duration(self.remote_flush_deadline_s)}",
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
