"""The retention job: drops raw samples and the replica history (``replica_reports``, kept as long), 1-minute
rollups and stale backlog entries past their retention.

Deletion walks up from the oldest row in slices of ``batch_seconds``, each slice its own short transaction with an
optional pause between slices, so ingest (SQLite has one writer) never waits long behind it. ``series_latest`` and
``node_reports`` are left alone: a node's last values and last report stay visible however old they are (nodes are
never pruned; were they, their report would go with them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Engine, delete, func, select

from collector.rollups import bucket_start
from collector.tables import ROLLUP_BUCKET_SECONDS, replica_reports, rollup_backlog, rollups_1m, samples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetentionReport:
    """What one run deleted, and in how many transactions (``batches``)."""

    samples_deleted: int
    rollups_deleted: int
    backlog_deleted: int
    batches: int
    replica_reports_deleted: int = 0


class RetentionJob:
    """Deletes what is older than the retention; the scheduler calls ``run(now)`` every few minutes."""

    def __init__(
        self,
        engine: Engine,
        *,
        raw_retention_seconds: float,
        rollup_retention_seconds: float,
        batch_seconds: float = 60.0,
        pause_seconds: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if batch_seconds < ROLLUP_BUCKET_SECONDS or batch_seconds % ROLLUP_BUCKET_SECONDS:
            raise ValueError(f"batch_seconds must be a whole number of minutes, got {batch_seconds}")
        if raw_retention_seconds <= 0 or rollup_retention_seconds <= 0 or pause_seconds < 0:
            raise ValueError("retentions must be positive and pause_seconds must be >= 0")
        self._engine = engine
        self._raw_retention_seconds = raw_retention_seconds
        self._rollup_retention_seconds = rollup_retention_seconds
        self._batch_seconds = batch_seconds
        self._pause_seconds = pause_seconds
        self._sleep = sleep
        self._batches = 0

    def run(self, now: float) -> RetentionReport:
        """Delete samples, replica reports and backlog entries before the raw cutoff and rollups before the rollup
        cutoff."""
        # Whole minutes only: now 90 130, retention 86 400 → cutoff 3 720, not 3 730, so no minute is left with part
        # of its samples (re-rolling it from the backlog would overwrite a full rollup with a partial one).
        raw_cutoff = bucket_start(now - self._raw_retention_seconds)
        rollup_cutoff = now - self._rollup_retention_seconds
        self._batches = 0
        samples_deleted = self._delete_before(samples.c.ts, raw_cutoff)
        replicas_deleted = self._delete_before(replica_reports.c.ts, raw_cutoff)
        rollups_deleted = self._delete_before(rollups_1m.c.bucket, rollup_cutoff)
        backlog_deleted = self._delete_backlog(raw_cutoff)
        report = RetentionReport(samples_deleted, rollups_deleted, backlog_deleted, self._batches, replicas_deleted)
        if samples_deleted or replicas_deleted or rollups_deleted or backlog_deleted:
            log.info(
                "retention: deleted %d samples, %d replica reports, %d rollups, %d backlog entries in %d batches",
                samples_deleted,
                replicas_deleted,
                rollups_deleted,
                backlog_deleted,
                report.batches,
            )
        return report

    def _delete_before(self, column: Column[Any], cutoff: float) -> int:
        """Delete rows with ``column < cutoff`` one slice at a time, jumping over empty stretches."""
        deleted = 0
        while (oldest := self._oldest(column, cutoff)) is not None:
            # oldest 1 000.5, batch 60 → delete below 1 020.0: the whole minute [960, 1 020) and nothing after it
            upper = min(bucket_start(oldest) + self._batch_seconds, cutoff)
            self._pause_between_batches()
            with self._engine.begin() as conn:
                deleted += conn.execute(delete(column.table).where(column < upper)).rowcount
        return deleted

    def _oldest(self, column: Column[Any], cutoff: float) -> float | None:
        with self._engine.connect() as conn:
            oldest = conn.scalar(select(func.min(column)).where(column < cutoff))
        return None if oldest is None else float(oldest)

    def _delete_backlog(self, raw_cutoff: float) -> int:
        """Backlog minutes before the raw cutoff have no samples left to re-roll (a small table: one statement)."""
        if self._oldest(rollup_backlog.c.bucket, raw_cutoff) is None:
            return 0
        self._pause_between_batches()
        with self._engine.begin() as conn:
            count: int = conn.execute(delete(rollup_backlog).where(rollup_backlog.c.bucket < raw_cutoff)).rowcount
        return count

    def _pause_between_batches(self) -> None:
        if self._batches and self._pause_seconds > 0:
            self._sleep(self._pause_seconds)
        self._batches += 1
