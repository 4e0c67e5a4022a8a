"""Two real servers on one PostgreSQL: exactly one controller holds the lease; stopping it hands over."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from fleetpilot.launch import ServerProcess
from migrations import runner
from tests.support.lease import lease_holder, wait_for_holder
from tests.support.postgres import fresh_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
FAST = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5", "FLEETPILOT_LEADER_LEASE_SECONDS": "3"}


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        runner.upgrade(url)
        yield url


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
