"""A real Prometheus scrapes a real ``fleetpilot server``: pushed samples come out of PromQL with their labels.

A node with no samples for 3 s is down and its series leave ``/metrics``, so the test keeps pushing while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from tests.support.prometheus import PrometheusProcess, require_program

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

WAIT_S = 60.0
PUSH_EVERY_S = 0.5
QUERY = 'fleetpilot_gpu_utilization_ratio{node="node-a"}'


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    require_program("prometheus")  # skip before starting anything
    server = ServerProcess(f"sqlite:///{tmp_path / 'fleetpilot.db'}", log_path=tmp_path / "server.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def prometheus(server: ServerProcess, tmp_path: Path) -> Iterator[PrometheusProcess]:
    prometheus = PrometheusProcess(
        workdir=tmp_path / "prometheus", target=f"127.0.0.1:{server.port}", scrape_interval_s=1.0
    )
    try:
        prometheus.start()
        yield prometheus
    finally:
        prometheus.stop()


@dataclass
class Pusher:
    """Pushes one GPU sample per call as agent ``node_id``, with increasing ``seq`` and the current time."""

    client: httpx.Client
    node_id: str
    seq: int = field(default=0)

    def push(self, utilization: float) -> None:
        self.seq += 1
        sample = {
            "seq": self.seq,
            "ts": time.time(),
            "device": 0,
            "pool": None,
            "metrics": {"gpu_utilization_ratio": utilization, "gpu_memory_used_bytes": 2e9},
        }
        response = self.client.post("/api/v1/ingest", json={"node_id": self.node_id, "samples": [sample]})
        assert response.status_code == 200, response.text
        assert response.json()["accepted"] == 1


@pytest.fixture
def pusher(server: ServerProcess) -> Iterator[Pusher]:
    headers = {"Authorization": f"Bearer {server.create_agent_token('node-a')}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as client:
        yield Pusher(client, "node-a")


def diagnosis(prometheus: PrometheusProcess, server: ServerProcess) -> str:
    try:
        targets: Any = [(t["health"], t["lastError"], t["scrapeUrl"]) for t in prometheus.targets()]
    except httpx.HTTPError as exc:
        targets = f"(targets unavailable: {exc})"
    return (
        f"targets: {targets}\n--- prometheus log ---\n{prometheus.log_tail()}\n--- server log ---\n{server.log_tail()}"
    )


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(r["value"][1]) for r in result]


def push_until_scraped(
    prometheus: PrometheusProcess, server: ServerProcess, pusher: Pusher, utilization: float
) -> list[dict[str, Any]]:
    """Push ``utilization`` every 0.5 s until Prometheus answers exactly it for node-a; at most ``WAIT_S``."""
    deadline = time.monotonic() + WAIT_S
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pusher.push(utilization)
        result = prometheus.query(QUERY)
        if values(result) == [utilization]:
            return result
        time.sleep(PUSH_EVERY_S)
    pytest.fail(
        f"{QUERY} never answered {utilization} within {WAIT_S} s; last {result}\n{diagnosis(prometheus, server)}"
    )


def wait_for(prometheus: PrometheusProcess, server: ServerProcess, promql: str, expected: list[float]) -> None:
    deadline = time.monotonic() + WAIT_S
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = prometheus.query(promql)
        if values(result) == expected:
            return
        time.sleep(PUSH_EVERY_S)
    pytest.fail(f"{promql} never answered {expected} within {WAIT_S} s; last {result}\n{diagnosis(prometheus, server)}")


def test_prometheus_scrapes_pushed_values_with_their_labels(
    server: ServerProcess, prometheus: PrometheusProcess, pusher: Pusher
) -> None:
    result = push_until_scraped(prometheus, server, pusher, 0.83)

    # The empty pool label of a GPU series is no label at all once in Prometheus.
    assert result[0]["metric"] == {
        "__name__": "fleetpilot_gpu_utilization_ratio",
        "node": "node-a",
        "gpu": "0",
        "job": "fleetpilot",
        "instance": f"127.0.0.1:{server.port}",
    }
    assert values(prometheus.query('up{job="fleetpilot"}')) == [1.0]

    # A new reading replaces the old one at the next scrape.
    push_until_scraped(prometheus, server, pusher, 0.27)
    assert values(prometheus.query('fleetpilot_node_up{node="node-a"}')) == [1.0]
    accepted = values(prometheus.query('fleetpilot_collector_ingested_samples_total{outcome="accepted"}'))
    assert len(accepted) == 1
    assert 1 <= accepted[0] <= pusher.seq


def test_a_silent_node_goes_down_and_its_series_go_stale_in_prometheus(
    server: ServerProcess, prometheus: PrometheusProcess, pusher: Pusher
) -> None:
    push_until_scraped(prometheus, server, pusher, 0.5)

    # No more pushes: after 3 s the node is down, its series leave /metrics and Prometheus marks them stale.
    wait_for(prometheus, server, 'fleetpilot_node_up{node="node-a"}', [0.0])
    wait_for(prometheus, server, QUERY, [])
