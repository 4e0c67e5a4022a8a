"""A real agent process pushing to a real server process: outages and kills lose nothing and duplicate nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetpilot.launch import ServerProcess
from tests.support.fleet import Fleet, stop_agent

pytestmark = pytest.mark.slow


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ServerProcess(f"sqlite:///{tmp_path}/e2e.db") as server:
        yield Fleet(tmp_path, server)


def test_collector_killed_for_five_seconds_loses_nothing(fleet: Fleet) -> None:
    agent = fleet.start_agent()
    try:
        fleet.wait_for_rows(10)
        fleet.server.kill()
        time.sleep(5)
        fleet.server.start()
        before = fleet.stored().rows
        fleet.wait_for_rows(before + 20)
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()


def test_agent_killed_mid_outage_and_restarted_loses_nothing(fleet: Fleet) -> None:
    agent = fleet.start_agent()
    try:
        fleet.wait_for_rows(10)
        fleet.server.kill()
        fleet.wait_for_spooling()  # samples the dead server never got
        agent.kill()  # SIGKILL: no flush, samples only in the spool
        agent = fleet.start_agent()
        fleet.wait_for_spooling()  # and more from the restarted agent, behind them
        fleet.server.start()
        before = fleet.stored().rows
        fleet.wait_for_rows(before + 40)
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()
