"""SIGKILL in the middle of ingest: the collector (server) and the agent each killed and restarted, repeatedly,
while samples flow. Counted by seq afterwards: zero lost, zero stored twice (CONTRACT section 5)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetpilot.launch import ServerProcess
from migrations import runner
from tests.support.fleet import Fleet, stop_agent, stored
from tests.support.ingest_load import IngestLoad
from tests.support.postgres import fresh_database

pytestmark = pytest.mark.slow
KILLS = 3
LOAD_NODE = "node-load"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ServerProcess(f"sqlite:///{tmp_path}/faults.db", log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_backend_fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    """The collector's commit-then-answer matters on both backends: a kill between the two is the case."""
    if request.param == "sqlite":
        yield request.getfixturevalue("fleet")
        return
    with fresh_database() as url:
        runner.upgrade(url)
        with ServerProcess(url, log_path=tmp_path / "server.log") as server:
            yield Fleet(tmp_path, server)


def test_collector_sigkilled_during_ingest_loses_and_duplicates_nothing(any_backend_fleet: Fleet) -> None:
    fleet = any_backend_fleet
    rng = random.Random(7)
    agent = fleet.start_agent()
    try:
        with IngestLoad(fleet.server.url, fleet.token(LOAD_NODE), LOAD_NODE, interval_s=0.01) as load:
            fleet.wait_for_rows(10)
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.3, 1.0))  # somewhere inside a push of the agent or the load
                fleet.server.kill()
                fleet.server.start()
                committed = load.committed_seq
                load.wait_for_commits(more_than=committed, timeout_s=15)
            fleet.wait_for_rows(fleet.stored().rows + 20)
        assert set(load.statuses()) <= {200, 0}, load.statuses()
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()
    got = stored(fleet.server.database_url, LOAD_NODE)
    assert (got.first_seq, got.last_seq, got.rows) == (1, load.committed_seq, load.committed_seq)


def test_agent_sigkilled_and_restarted_loses_and_duplicates_nothing(fleet: Fleet) -> None:
    rng = random.Random(11)
    agent = fleet.start_agent()
    try:
        fleet.wait_for_rows(10)
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.0))
            agent.kill()  # no flush: what was sampled but not acknowledged is only in the spool
            agent = fleet.start_agent()
            fleet.wait_for_rows(fleet.stored().rows + 5)
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()
