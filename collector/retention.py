"""The retention job: drops raw samples and the replica history (``replica_reports``, kept as long), 1-minute
rollups and stale backlog entries past their retention.

Deletion walks up from the oldest row in slices of ``batch_seconds``, each slice its own short transaction with an
optional pause between slices, so ingest (SQLite has one writer) never waits long behind it. ``series_latest`` and
``node_reports`` are left alone: a node's last values and last report stay visible however old they are (nodes are
never pruned; were they, their report would go with them).

Where ``samples`` and ``rollups_1m`` are partitioned (PostgreSQL, ``collector.partitions``), each partition that lies
wholly before the cutoff is detached and dropped instead, and only the default partition's rows are deleted by
slices. The partition straddling the cutoff is left whole: deleting its old rows would delete every row one by one
after all (the cutoff sweeps through each partition, five minutes a run), and drops would only ever find empty
tables. So a row outlives its retention by up to one partition period (an hour of samples, a day of rollups).
A dropped partition's rows are counted exactly (``count(*)`` once it is detached, when nothing writes to it: one
sequential read of a table about to go, much cheaper than deleting the rows). The detach takes the table's ACCESS
EXCLUSIVE lock for an instant, so it waits at most ``LOCK_TIMEOUT`` for long readers (ingest would queue behind
it) and otherwise gives up until the next run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnClause, Connection, Engine, TableClause, column, delete, func, select, table, text
from sqlalchemy.exc import OperationalError

from collector.partitions import (
    LOCK_TIMEOUT,
    PARTITION_SCHEMA,
    ROLLUPS,
    SAMPLES,
    PartitionScheme,
    is_partitioned,
    lock_timed_out,
    partitions_of,
    wholly_before,
)
from collector.rollups import bucket_start
from collector.tables import ROLLUP_BUCKET_SECONDS, replica_reports, rollup_backlog, rollups_1m, samples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetentionReport:
    """What one run deleted (rows of dropped partitions included), and in how many transactions (``batches``: a
    slice of rows, or one partition's detach and drop)."""

    samples_deleted: int
    rollups_deleted: int
    backlog_deleted: int
    batches: int
    replica_reports_deleted: int = 0
    partitions_dropped: int = 0


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
        self._dropped = 0

    def run(self, now: float) -> RetentionReport:
        """Delete samples, replica reports and backlog entries before the raw cutoff and rollups before the rollup
        cutoff."""
        # Whole minutes only: now 90 130, retention 86 400 → cutoff 3 720, not 3 730, so no minute is left with part
        # of its samples (re-rolling it from the backlog would overwrite a full rollup with a partial one).
        raw_cutoff = bucket_start(now - self._raw_retention_seconds)
        rollup_cutoff = now - self._rollup_retention_seconds
        self._batches = self._dropped = 0
        samples_deleted = self._remove_before(SAMPLES, samples.c.ts, raw_cutoff)
        replicas_deleted = self._delete_before(replica_reports.c.ts, raw_cutoff)
        rollups_deleted = self._remove_before(ROLLUPS, rollups_1m.c.bucket, rollup_cutoff)
        backlog_deleted = self._delete_backlog(raw_cutoff)
        report = RetentionReport(
            samples_deleted, rollups_deleted, backlog_deleted, self._batches, replicas_deleted, self._dropped
        )
        if samples_deleted or replicas_deleted or rollups_deleted or backlog_deleted:
            log.info(
                "retention: deleted %d samples, %d replica reports, %d rollups, %d backlog entries in %d batches"
                " (%d partitions dropped)",
                samples_deleted,
                replicas_deleted,
                rollups_deleted,
                backlog_deleted,
                report.batches,
                report.partitions_dropped,
            )
        return report

    def _remove_before(self, scheme: PartitionScheme, col: ColumnClause[Any], cutoff: float) -> int:
        """Rows before ``cutoff``: by slices from a plain table; from a partitioned one, by dropping the partitions
        wholly before it and deleting the default partition's old rows by slices."""
        with self._engine.connect() as conn:
            partitioned = is_partitioned(conn, scheme.table)
        if not partitioned:
            return self._delete_before(col, cutoff)
        removed = self._drop_partitions(scheme, cutoff)
        default = table(scheme.default_name, column(scheme.column), schema=PARTITION_SCHEMA)
        return removed + self._delete_before(default.c[scheme.column], cutoff)

    def _drop_partitions(self, scheme: PartitionScheme, cutoff: float) -> int:
        """Detach and drop each partition wholly before ``cutoff``, oldest first; the rows they held. Tables a run
        detached but did not get to drop (the process stopped between) go first."""
        removed = 0
        with self._engine.connect() as conn:
            detached = _detached_partitions(conn, scheme)
            old = [p.name for p in wholly_before(partitions_of(conn, scheme), cutoff)]
        for name in detached:
            self._pause_between_batches()
            removed += self._drop_detached(name)
        for name in old:
            self._pause_between_batches()
            try:
                with self._engine.begin() as conn:
                    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                    conn.execute(text(f"ALTER TABLE public.{scheme.table} DETACH PARTITION {PARTITION_SCHEMA}.{name}"))
            except OperationalError as exc:
                if not lock_timed_out(exc):
                    raise
                log.warning("retention: %s is busy; the next run drops %s", scheme.table, name)
                break
            removed += self._drop_detached(name)
        return removed

    def _drop_detached(self, name: str) -> int:
        with self._engine.begin() as conn:
            rows: int = conn.scalar(text(f"SELECT count(*) FROM {PARTITION_SCHEMA}.{name}")) or 0
            conn.execute(text(f"DROP TABLE {PARTITION_SCHEMA}.{name}"))
        self._dropped += 1
        return rows

    def _delete_before(self, col: ColumnClause[Any], cutoff: float) -> int:
        """Delete rows with ``col < cutoff`` one slice at a time, jumping over empty stretches."""
        deleted = 0
        while (oldest := self._oldest(col, cutoff)) is not None:
            # oldest 1 000.5, batch 60 → delete below 1 020.0: the whole minute [960, 1 020) and nothing after it
            upper = min(bucket_start(oldest) + self._batch_seconds, cutoff)
            self._pause_between_batches()
            assert isinstance(col.table, TableClause)
            with self._engine.begin() as conn:
                deleted += conn.execute(delete(col.table).where(col < upper)).rowcount
        return deleted

    def _oldest(self, col: ColumnClause[Any], cutoff: float) -> float | None:
        with self._engine.connect() as conn:
            oldest = conn.scalar(select(func.min(col)).where(col < cutoff))
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


def _detached_partitions(conn: Connection, scheme: PartitionScheme) -> list[str]:
    """Tables named as the scheme's partitions that are attached to nothing: what a stopped run left detached."""
    return list(
        conn.scalars(
            text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = :schema AND c.relkind = 'r' AND NOT c.relispartition AND c.relname LIKE :pattern"
                " ORDER BY c.relname"
            ),
            {"schema": PARTITION_SCHEMA, "pattern": scheme.table.replace("_", r"\_") + r"\_p%"},
        )
    )
