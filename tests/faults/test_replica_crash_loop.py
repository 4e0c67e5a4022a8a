"""A replica that crashes as it starts, again and again: the agent's supervisor restarts it after a back-off that
doubles (1 s, 2 s, 4 s, ...), not in a tight loop, the agent's /metrics report the crashes and the back-off while the
agent itself stays healthy and keeps pushing, and the server's default ReplicaCrashLooping alert fires for the pool
(the agent's pool reading carries the consecutive crashes).

The crash is real (the replica process exits 3 at start); it is injected through ``sitecustomize`` on the agent's
PYTHONPATH (tests/faults/crashing_replica/), which only replica processes act on.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetpilot.launch import ServerProcess
from inference_agent.ports import free_port
from tests.support.fleet import Fleet, stop_agent

pytestmark = pytest.mark.slow
POOL = "crashy"
WATCH_S = 9.0
CRASHING_REPLICA = Path(__file__).parent / "crashing_replica"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ServerProcess(f"sqlite:///{tmp_path}/faults.db", log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def pool_figures(metrics_url: str) -> dict[str, float]:
    """The pool's crash counter, consecutive-crash gauge and replicas in back-off, from the agent's /metrics."""
    figures: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{metrics_url}/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.labels.get("pool") != POOL:
                continue
            if sample.name == "fleetpilot_agent_replica_crashes_total":
                figures["crashes"] = sample.value
            elif sample.name == "fleetpilot_agent_replica_consecutive_crashes":
                figures["consecutive"] = sample.value
            elif sample.name == "fleetpilot_agent_replicas" and sample.labels.get("phase") == "backoff":
                figures["backoff"] = sample.value
    return figures


def crash_loop_alert(fleet: Fleet, timeout_s: float = 10.0) -> tuple[str, str] | None:
    """The server's ReplicaCrashLooping alert as (status, pool), once it fires (None if it does not in time)."""
    headers = {"Authorization": f"Bearer {fleet.server.admin_token}"}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alerts = httpx.get(f"{fleet.server.url}/api/v1/alerts?state=firing", headers=headers, timeout=5).json()
        for alert in alerts["items"]:
            if alert["labels"].get("alertname") == "ReplicaCrashLooping":
                return alert["status"], alert["labels"].get("pool", "")
        time.sleep(0.5)
    return None


def test_a_crash_looping_replica_is_restarted_with_a_growing_backoff(fleet: Fleet) -> None:
    env = {"PYTHONPATH": str(CRASHING_REPLICA), "FLEETPILOT_REPLICA_ENGINE": "fake"}
    agent = fleet.start_agent(env=env, workload="builtin", pools=f"{POOL}=text:1", serve_port=free_port())
    crash_times: list[float] = []
    seen_backoff = False
    try:
        started = time.monotonic()
        while time.monotonic() - started < WATCH_S:
            figures = pool_figures(agent.metrics_url)
            crashes = int(figures.get("crashes", 0))
            crash_times += [time.monotonic()] * (crashes - len(crash_times))
            seen_backoff |= figures.get("backoff", 0) == 1
            time.sleep(0.05)
        assert httpx.get(f"{agent.metrics_url}/healthz", timeout=5).status_code == 200
        assert crash_loop_alert(fleet) == ("firing", POOL)
        rows = fleet.stored().rows
        fleet.wait_for_rows(rows + 5)  # the agent keeps sampling and pushing beside the crashing replica
        final = pool_figures(agent.metrics_url)
    finally:
        stop_agent(agent)
    # 1 + 2 + 4 s of back-off fit in the 9 s watched; without back-off it would be dozens of crashes
    assert 3 <= len(crash_times) <= 5, (crash_times, fleet.agent_log())
    assert final["consecutive"] == final["crashes"] >= len(crash_times)  # never stable: the count keeps growing
    assert seen_backoff
    gaps = [later - earlier for earlier, later in itertools.pairwise(crash_times)]
    # crash n waits base × 2^(n−1) before its restart: 1 s, 2 s, 4 s (the first crash may predate the first look)
    for n, gap in enumerate(gaps[1:], start=2):
        assert gap >= 0.8 * 2 ** (n - 1), (n, gaps)
    assert "crash 3; restart in 4 s" in fleet.agent_log()  # the log says when it tries again
