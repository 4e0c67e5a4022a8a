"""The periodic-job wrapper: a database that is away is one warning line per run, and the job runs again; a data job
runs on one server at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from collector.database import make_engine
from collector.tables import metadata
from fleet.lease import Lease
from fleetpilot.jobs import OnceAcrossServers, _every


class RecordingScheduler:
    def __init__(self) -> None:
        self.jobs: dict[str, Callable[[], None]] = {}

    def add_job(self, func: Callable[[], None], trigger: str, **kwargs: Any) -> None:
        self.jobs[kwargs["id"]] = func


def test_a_database_outage_is_one_warning_and_other_failures_still_raise(caplog: pytest.LogCaptureFixture) -> None:
    scheduler = RecordingScheduler()
    calls: list[float] = []

    def away(*, now: float) -> None:
        calls.append(now)
        raise OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))

    def broken(*, now: float) -> None:
        raise ValueError("a bug")

    _every(scheduler, "autoscaler", 5, away)
    _every(scheduler, "enforcer", 5, broken)
    with caplog.at_level(logging.WARNING, logger="fleetpilot.jobs"):
        scheduler.jobs["autoscaler"]()
        scheduler.jobs["autoscaler"]()
    assert len(calls) == 2  # it runs again next time
    assert [r.getMessage() for r in caplog.records] == [
        "autoscaler: database unavailable (connection refused); the next run tries again"
    ] * 2
    assert all(r.exc_info is None for r in caplog.records)  # no traceback
    with pytest.raises(ValueError, match="a bug"):  # APScheduler logs it with its traceback
        scheduler.jobs["enforcer"]()


def test_a_data_job_runs_once_across_servers_and_moves_when_its_holder_stops(tmp_path: Any) -> None:
    """Two servers on one database tick rollups every 60 s: one runs it each period; the other takes it over once
    the first stops renewing (a SIGKILL), two periods after its last run."""
    engine = make_engine(f"sqlite:///{tmp_path}/jobs.db")
    metadata.create_all(engine)
    runs: list[tuple[str, float]] = []

    def server(name: str) -> OnceAcrossServers:
        lease = Lease(engine, "job:rollups", name, ttl_seconds=max(15.0, 2 * 60.0))
        return OnceAcrossServers(lease, lambda *, now: runs.append((name, now)))

    a, b = server("a"), server("b")
    for period in range(3):
        now = 1000.0 + 60 * period
        a(now=now)
        b(now=now)
    assert runs == [("a", 1000.0), ("a", 1060.0), ("a", 1120.0)]  # once a period, on the holder
    runs.clear()
    for period in range(3, 7):  # a is gone: b runs once a's lease (120 s after its last run, 1120) expired
        b(now=1000.0 + 60 * period)
    assert runs == [("b", 1300.0), ("b", 1360.0)]
    engine.dispose()
