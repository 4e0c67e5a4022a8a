"""Two servers on one PostgreSQL; the leading one is SIGKILLed (no chance to release its lease). The other takes
the lease once it expires, not before (never two leaders at once), and within a few ticks after."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from autoscaler.controller import LEASE_NAME
from collector.database import make_engine
from fleet.lease import leases
from fleetpilot.launch import ServerProcess
from migrations import runner
from tests.support.lease import holder_pid, wait_for_holder
from tests.support.postgres import fresh_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
LEASE_S = 3.0
TICK_S = 0.5
FAST = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": str(TICK_S), "FLEETPILOT_LEADER_LEASE_SECONDS": str(LEASE_S)}


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        runner.upgrade(url)
        yield url


def lease_row(url: str) -> tuple[str, float]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(select(leases.c.holder, leases.c.expires_at).where(leases.c.name == LEASE_NAME)).one()
    finally:
        engine.dispose()
    return str(row.holder), float(row.expires_at)


def test_the_follower_takes_over_when_the_leader_is_sigkilled(database_url: str, tmp_path: Path) -> None:
    first = ServerProcess(database_url, env=dict(FAST), log_path=tmp_path / "first.log")
    second = ServerProcess(
        database_url, admin_token=first.admin_token, env=dict(FAST), log_path=tmp_path / "second.log"
    )
    with first, second:
        holder = wait_for_holder(database_url)
        by_pid = {server.process.pid: server for server in (first, second) if server.process is not None}
        leader = by_pid[holder_pid(holder)]
        follower = second if leader is first else first
        leader.kill()  # SIGKILL: the lease stays in the table until it expires
        killed_holder, expires_at = lease_row(database_url)
        assert killed_holder == holder and expires_at > time.time() - TICK_S
        taken = wait_for_holder(database_url, other_than=holder, timeout_s=LEASE_S + 10)
        taken_at = time.time()
        assert follower.process is not None and holder_pid(taken) == follower.process.pid
        assert taken_at >= expires_at, "the follower took a lease that had not expired: two leaders"
        assert taken_at - expires_at < LEASE_S, "the follower should take over within a few ticks of the expiry"
