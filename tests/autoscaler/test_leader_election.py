"""Two real servers on one PostgreSQL: exactly one controller holds the lease; stopping it hands over."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from autoscaler.controller import LEASE_NAME
from autoscaler.lease import leases
from collector.database import make_engine
from fleetpilot.launch import ServerProcess
from migrations import runner
from tests.support.postgres import fresh_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
FAST = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5", "FLEETPILOT_LEADER_LEASE_SECONDS": "3"}


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        runner.upgrade(url)
        yield url


def lease_holder(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.scalar(
                select(leases.c.holder).where(leases.c.name == LEASE_NAME, leases.c.expires_at > time.time())
            )
    finally:
        engine.dispose()


def wait_for_holder(url: str, *, other_than: str | None = None, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        holder = lease_holder(url)
        if holder is not None and holder != other_than:
            return holder
        time.sleep(0.2)
    raise AssertionError(f"no lease holder other than {other_than!r} within {timeout_s} s")


def test_one_controller_leads_and_the_other_takes_over_when_it_stops(database_url: str) -> None:
    first = ServerProcess(database_url, env=dict(FAST))
    second = ServerProcess(database_url, admin_token=first.admin_token, env=dict(FAST))
    with first, second:
        holder = wait_for_holder(database_url)
        time.sleep(2.0)  # several ticks of both: the lease stays where it is
        assert lease_holder(database_url) == holder
        pids = {first.process.pid: first, second.process.pid: second}  # type: ignore[union-attr]
        leader = pids[int(holder.split(":")[1])]
        follower = second if leader is first else first
        leader.stop()  # SIGTERM: the leader releases its lease on the way out
        taken = wait_for_holder(database_url, other_than=holder, timeout_s=5.0)
        assert int(taken.split(":")[1]) == follower.process.pid  # type: ignore[union-attr]
