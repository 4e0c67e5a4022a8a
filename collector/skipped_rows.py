"""What the periodic jobs skip: a row, series, node or pool whose computation raised is logged with where it was,
counted in ``fleetpilot_jobs_skipped_rows_total{job}``, and left out, so the job goes on with the rest.

It lives in the lowest room because the rollup job (collector) uses it as much as the alert evaluator does. One row
stored before ingest bounded its numbers (a 400-digit integer in ``extra``) failed every evaluation, every second,
for the whole fleet; now it costs its own series one log line and one count per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# What a malformed value raises in arithmetic, conversions and lookups. A database error is none of these: the run
# then fails whole and the scheduler tries again (fleetpilot.jobs).
BAD_VALUE_ERRORS: tuple[type[Exception], ...] = (ArithmeticError, ValueError, TypeError, LookupError, AttributeError)


class Job(StrEnum):
    ROLLUPS = "rollups"
    FORECASTS = "forecasts"
    AUTOSCALER = "autoscaler"
    ENFORCER = "enforcer"
    ALERTS = "alerts"


def skipped_rows_counter(registry: CollectorRegistry | None) -> Counter:
    """The one counter, with every job's label present from the start (0 until something is skipped)."""
    counter = Counter(
        "fleetpilot_jobs_skipped_rows",
        "Rows, series, nodes or pools a periodic job left out of a run because computing them raised, by job.",
        ["job"],
        registry=registry,
    )
    for job in Job:
        counter.labels(job.value)
    return counter


class SkippedRows:
    """One job's skips; without a counter (a job built in a test) they are only logged."""

    def __init__(self, job: Job, counter: Counter | None = None) -> None:
        self.job = job
        self._count = (counter if counter is not None else skipped_rows_counter(None)).labels(job.value)

    def skip(self, where: str, error: Exception) -> None:
        log.warning("%s: skipped %s this run: %s: %s", self.job.value, where, type(error).__name__, error)
        self._count.inc()

    def each(self, items: Iterable[T], where: Callable[[T], str], compute: Callable[[T], R]) -> list[R]:
        """``compute`` of every item, leaving out (and logging as ``where(item)``) those whose computation raised."""
        done = []
        for item in items:
            try:
                done.append(compute(item))
            except BAD_VALUE_ERRORS as error:
                self.skip(where(item), error)
        return done
