"""Agents whose clocks are 5 minutes ahead and 5 minutes behind the server's (CONTRACT section 5: ``ts`` up to
300 s in the future is accepted). Their samples are stored as stamped, each node counts as up by the server's clock
(when its samples arrived, not what they say), and its series reads back at the skewed times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from tests.support.faketime import skewed_clock_env
from tests.support.fleet import Fleet, stop_agent

pytestmark = pytest.mark.slow
SKEW_S = 300
NODES = {"node-ahead": +SKEW_S, "node-behind": -SKEW_S}
METRIC = "network_throughput_bytes_per_second"  # the host probe measures it on any machine


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ServerProcess(f"sqlite:///{tmp_path}/faults.db", log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def api(fleet: Fleet, path: str, **params: float | str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {fleet.server.admin_token}"}
    return httpx.get(f"{fleet.server.url}/api/v1{path}", params=params, headers=headers, timeout=10)


def test_agents_five_minutes_ahead_and_behind_are_accepted_up_and_readable(fleet: Fleet) -> None:
    env = {node: skewed_clock_env(offset) for node, offset in NODES.items()}
    agents = [fleet.start_agent(node, env=env[node]) for node in NODES]
    try:
        for node in NODES:
            fleet.wait_for_rows(20, node_id=node)
        now = time.time()
        listed = {node["id"]: node for node in api(fleet, "/nodes").json()["items"]}
        for node, offset in NODES.items():
            assert listed[node]["status"] == "up", listed[node]  # by the server's clock
            assert abs(listed[node]["last_seen"] - now) < 5
            points = api(fleet, "/series", node=node, metric=METRIC, start=now - 600, end=now + 600).json()["points"]
            assert points, f"no {METRIC} points for {node}"
            newest = max(ts for ts, _value in points)
            assert abs(newest - (now + offset)) < 10, (node, newest - now)  # stored as the agent stamped it
        assert "rejected" not in "".join(fleet.agent_log(node) for node in NODES)
    finally:
        for agent in agents:
            stop_agent(agent)
    for node in NODES:
        fleet.assert_every_sample_exactly_once(node)
