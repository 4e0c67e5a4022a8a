"""The periodic-job wrapper: a database that is away is one warning line per run, and the job runs again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from fleetpilot.jobs import _every


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
