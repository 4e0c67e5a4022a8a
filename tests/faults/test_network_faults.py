"""A bad network between agent and collector: every chunk delayed, connections reset as they open and cut
mid-request or mid-answer. The agent's spool and the collector's idempotency by seq still deliver every sample
exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetpilot.launch import ServerProcess
from tests.support.flaky_proxy import Faults, FlakyProxy
from tests.support.fleet import Fleet, stop_agent

pytestmark = pytest.mark.slow
BAD_NETWORK_S = 8.0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ServerProcess(f"sqlite:///{tmp_path}/faults.db", log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def agent_counter(metrics_url: str, name: str, outcome: str) -> float:
    """A counter of the agent's /metrics with ``outcome``; 0 when it has not been counted yet."""
    for family in text_string_to_metric_families(httpx.get(f"{metrics_url}/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("outcome") == outcome:
                return sample.value
    return 0.0


def test_a_delaying_and_cutting_network_loses_and_duplicates_nothing(fleet: Fleet) -> None:
    faults = Faults(delay_s=0.05, jitter_s=0.1, reset_on_connect=0.3, cut_per_chunk=0.15)
    with FlakyProxy(fleet.server.port, faults, seed=3) as proxy:
        agent = fleet.start_agent(collector=proxy.url)
        try:
            time.sleep(BAD_NETWORK_S)
            assert proxy.counts.resets > 0 and proxy.counts.cuts > 0, proxy.counts
            fleet.wait_for_rows(1, timeout_s=60)  # data gets through the bad network (still bad), not only after
            # the agent met the faults (failed pushes, retried later), it was not just lucky
            assert agent_counter(agent.metrics_url, "fleetpilot_agent_pushes_total", "failed") > 0
            proxy.calm()
            fleet.wait_for_rows(fleet.stored().rows + 20)
        finally:
            stop_agent(agent)
    fleet.assert_every_sample_exactly_once()
