"""PostgreSQL stopped for 10 s under load: the server answers 503 with Retry-After, stays up, then recovers fully;
the agent's spool and a resending client lose nothing and store nothing twice.

The outage is of a private PostgreSQL (tests/support/private_postgres.py): the shared one serves others.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from migrations import runner
from tests.support.fleet import Fleet, stop_agent, stored
from tests.support.ingest_load import IngestLoad
from tests.support.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
OUTAGE_S = 10.0
LOAD_NODE = "node-load"


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as pg:
        runner.upgrade(pg.url)
        yield pg


@pytest.fixture
def fleet(tmp_path: Path, private_postgres: PrivatePostgres) -> Iterator[Fleet]:
    with ServerProcess(private_postgres.url, log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def test_a_database_outage_answers_503_then_recovers_and_loses_nothing(
    fleet: Fleet, private_postgres: PrivatePostgres
) -> None:
    agent = fleet.start_agent()
    try:
        with IngestLoad(fleet.server.url, fleet.token(LOAD_NODE), LOAD_NODE) as load:
            fleet.wait_for_rows(10)
            load.wait_for_commits(more_than=0, timeout_s=10)
            private_postgres.stop()
            time.sleep(OUTAGE_S / 2)
            during = httpx.get(f"{fleet.server.url}/readyz", timeout=5)
            time.sleep(OUTAGE_S / 2)
            assert fleet.server.process is not None and fleet.server.process.poll() is None, fleet.server.log_tail()
            answered = [a for a in load.answers if a.status == 503]
            assert answered, f"no 503 during the outage: {load.statuses()}\n{fleet.server.log_tail()}"
            assert all(a.retry_after is not None and float(a.retry_after) > 0 for a in answered)
            assert during.status_code == 503
            committed_before_restart = load.committed_seq
            private_postgres.start()
            load.wait_for_commits(more_than=committed_before_restart + 50, timeout_s=30)
            fleet.wait_for_rows(fleet.stored().rows + 20, timeout_s=40)
        assert set(load.statuses()) <= {200, 503, 0}, load.statuses()
        assert httpx.get(f"{fleet.server.url}/readyz", timeout=5).status_code == 200
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()
    got = stored(fleet.server.database_url, LOAD_NODE)
    assert (got.first_seq, got.last_seq, got.rows) == (1, load.committed_seq, load.committed_seq)
