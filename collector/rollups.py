"""The 1-minute rollup job: raw samples become one ``rollups_1m`` row per series and closed minute.

Each run re-rolls the last ``lookback_seconds`` before its watermark (samples arriving a few minutes late land in
their bucket), rolls every minute closed since, and re-rolls the (node, minute) pairs the ingest path put in
``rollup_backlog`` because they arrived later than that (a spool replayed after an outage). Rows are upserted, so
re-rolling a bucket replaces it: the job is idempotent. Work goes in short transactions of ``chunk_seconds`` of
sample time (one minute by default), so a run never holds the single SQLite writer for long.

Memory per run is bounded by one chunk, not by the range rolled: raw rows are fetched ``RAW_FETCH_ROWS`` at a time (a
server-side cursor on PostgreSQL) and folded into per-bucket arrays of doubles as they arrive, never kept as rows.
Loading the whole range as rows (the lookback's 11 minutes in one 600 s chunk) cost ~1.8 GB at its peak for
150 nodes × 8 GPUs at 2 Hz (2 M rows); glibc kept most of it after each run, and the server grew from 124 MB to
2 GB in 7 minutes (docs/benchmarks.md, "soak").
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, Result, and_, bindparam, delete, func, or_, select

from collector.aggregate import Stat, reduce_values
from collector.database import insert_for
from collector.skipped_rows import BAD_VALUE_ERRORS, Job, SkippedRows
from collector.tables import (
    AGENT_SOURCE,
    ROLLUP_BUCKET_SECONDS,
    ROLLUP_STATS,
    job_state,
    nodes,
    rollup_backlog,
    rollup_column,
    rollup_pending,
    rollups_1m,
    samples,
)
from wire.catalog import METRIC_NAMES

log = logging.getLogger(__name__)

WATERMARK_NAME = "rollups_1m"
SERIES_KEY: tuple[str, ...] = ("node_id", "device", "pool")
ROLLUP_KEY: tuple[str, ...] = (*SERIES_KEY, "bucket")
# Raw rows are read in this column order: the series key, ts, then the catalog's metrics (index 4 onwards).
RAW_COLUMNS = (
    samples.c.node_id,
    samples.c.device,
    samples.c.pool,
    samples.c.ts,
    *(samples.c[name] for name in METRIC_NAMES),
)
_FIRST_METRIC = 4
_STATS: tuple[Stat, ...] = tuple(Stat(s) for s in ROLLUP_STATS)
# Raw rows fetched from the database at a time: what a run holds of them at once, besides the chunk's values.
RAW_FETCH_ROWS = 5_000

BucketKey = tuple[str, int, str, float]


@dataclass(frozen=True)
class RollupReport:
    """What one run did: rollup rows upserted, backlog (node, minute) pairs re-rolled, the watermark after it."""

    buckets_written: int
    backlog_processed: int
    watermark: float | None


def bucket_start(ts: float) -> float:
    """The start of ``ts``'s minute: 125.5 → 120.0.

    Floor division, as the ingest path's backlog uses: 119.99999999999999 / 60 rounds up to 2.0, but
    119.99999999999999 // 60 is 1.0, so a sample is never put in a minute whose ``ts`` range excludes it.
    """
    return ts // ROLLUP_BUCKET_SECONDS * ROLLUP_BUCKET_SECONDS


class _BucketValues:
    """One (series, minute)'s samples as they are read: how many, and each metric's values as 8-byte doubles.

    Kept instead of the rows themselves: a row of 16 columns is ~0.5 KB of Python objects, its values here ~40 bytes.
    """

    __slots__ = ("samples", "values")

    def __init__(self) -> None:
        self.samples = 0
        self.values: list[array[float] | None] = [None] * len(METRIC_NAMES)

    def add(self, metrics: Sequence[Any]) -> None:
        """Take one raw row's metric values (catalog order; None where the sample did not carry the metric)."""
        self.samples += 1
        for index, value in enumerate(metrics):
            if value is not None:
                column = self.values[index]
                if column is None:
                    column = self.values[index] = array("d")
                column.append(value)


def rollup_rows(raw: Iterable[Sequence[Any]], skipped: SkippedRows | None = None) -> list[dict[str, Any]]:
    """One ``rollups_1m`` row per (series, minute) of ``raw`` rows laid out as ``RAW_COLUMNS``, sorted by key.

    ``raw`` is consumed as it is iterated and no row is kept: memory is the values of the minutes it covers. A minute
    that cannot be reduced is left out to ``skipped``: two samples of 1.7e308 bytes overflow its mean (``fsum``), and
    before, that failed every run on the same range, so no later minute was ever rolled.
    """
    buckets: dict[BucketKey, _BucketValues] = {}
    broken: dict[BucketKey, Exception] = {}  # a value no double holds (text written straight into SQLite)
    for row in raw:
        key = (row[0], row[1], row[2], bucket_start(row[3]))
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = _BucketValues()
        try:
            bucket.add(row[_FIRST_METRIC:])
        except BAD_VALUE_ERRORS as error:
            broken[key] = error

    def reduced(key: BucketKey) -> dict[str, Any]:
        if key in broken:
            raise broken[key]
        return _bucket_row(key, buckets[key])

    skipped = skipped if skipped is not None else SkippedRows(Job.ROLLUPS)
    return skipped.each(sorted(buckets), lambda k: f"node {k[0]} device {k[1]} pool {k[2]} minute {k[3]:.0f}", reduced)


def _bucket_row(key: BucketKey, bucket: _BucketValues) -> dict[str, Any]:
    """Min/mean/max/p99 of each metric over one bucket; NULL where no sample carried the metric (never 0)."""
    node_id, device, pool, start = key
    out: dict[str, Any] = {"node_id": node_id, "device": device, "pool": pool, "bucket": start}
    out["samples"] = bucket.samples
    for name, values in zip(METRIC_NAMES, bucket.values, strict=True):
        for stat in _STATS:
            out[rollup_column(name, stat.value)] = reduce_values(values, stat) if values else None
    return out


def read_raw(conn: Connection, where: ColumnElement[bool]) -> Result[Any]:
    """The raw rows matching ``where`` as ``RAW_COLUMNS``, fetched ``RAW_FETCH_ROWS`` at a time (PostgreSQL: from a
    server-side cursor) rather than the whole result at once."""
    return conn.execute(select(*RAW_COLUMNS).where(where).execution_options(yield_per=RAW_FETCH_ROWS))


class RollupJob:
    """Rolls closed minutes into ``rollups_1m``; the scheduler calls ``run(now)`` about once a minute."""

    def __init__(
        self,
        engine: Engine,
        *,
        lookback_seconds: float = 120.0,
        chunk_seconds: float = ROLLUP_BUCKET_SECONDS,
        backlog_batch: int = 100,
        skipped: SkippedRows | None = None,
        settle_seconds: float | None = None,
    ) -> None:
        if chunk_seconds < ROLLUP_BUCKET_SECONDS or chunk_seconds % ROLLUP_BUCKET_SECONDS:
            raise ValueError(f"chunk_seconds must be a whole number of minutes, got {chunk_seconds}")
        if lookback_seconds < 0 or backlog_batch < 1:
            raise ValueError("lookback_seconds must be >= 0 and backlog_batch >= 1")
        self._engine = engine
        self._lookback_seconds = lookback_seconds
        self._chunk_seconds = chunk_seconds
        self._backlog_batch = backlog_batch
        self._skipped = skipped if skipped is not None else SkippedRows(Job.ROLLUPS)
        # With the write path's minute aggregates (collector.minute_rollups): how long after a minute starts every
        # live process has flushed it; None: there are none, and this job rolls the raw samples of every minute.
        self._settle_seconds = settle_seconds
        upsert = insert_for(engine, rollups_1m)
        values = [c.name for c in rollups_1m.columns if c.name not in ROLLUP_KEY]
        self._upsert = upsert.on_conflict_do_update(
            index_elements=list(ROLLUP_KEY), set_={name: upsert.excluded[name] for name in values}
        )
        state = insert_for(engine, job_state)
        self._store_watermark = state.on_conflict_do_update(
            index_elements=["name"], set_={"watermark": state.excluded.watermark}
        )
        self._delete_backlog = delete(rollup_backlog).where(
            rollup_backlog.c.node_id == bindparam("b_node_id"), rollup_backlog.c.bucket == bindparam("b_bucket")
        )

    def run(self, now: float) -> RollupReport:
        """Roll every closed minute not yet rolled (plus the lookback) and the backlog; never the open minute."""
        end = bucket_start(now)  # now 1000.5 → 960.0: the minute [960, 1020) is still open
        if self._settle_seconds is not None:
            return self._logged(self._after_write_path(now, end))
        previous = self._read_watermark()
        start = self._range_start(previous)
        written, watermark = 0, previous
        if start is not None and start < end:
            written, watermark = self._roll_range(start, end, previous)
        processed, backlog_written = self._roll_backlog(end, end)
        return self._logged(RollupReport(written + backlog_written, processed, watermark))

    def _after_write_path(self, now: float, end: float) -> RollupReport:
        """The processes roll their minutes as they write them; this run only reads raw samples for what they could
        not: minutes a dead process held (still pending ``settle_seconds`` + a minute on), the backlog's late
        (node, minute) pairs once every live process has flushed that minute, and, on a first run, the history.
        The watermark moves to the oldest minute still held, or the open one."""
        assert self._settle_seconds is not None
        settled = bucket_start(now - self._settle_seconds)
        repaired = self._repair(settled - ROLLUP_BUCKET_SECONDS)
        previous = self._read_watermark()
        held = self._oldest_pending()
        target = end if held is None else min(end, held)
        written = 0
        if previous is None:
            start = self._range_start(None)
            if start is not None and start < target:
                written, _ = self._roll_range(start, target, None)
        watermark = target if previous is None else max(previous, target)
        if watermark != previous:
            with self._engine.begin() as conn:
                self._write_watermark(conn, watermark)
        # a remote-write or OTLP node's minutes reach no process's aggregates: rolled from its samples once closed
        processed, backlog_written = self._roll_backlog(settled, end)
        return RollupReport(written + repaired + backlog_written, processed, watermark)

    def _oldest_pending(self) -> float | None:
        with self._engine.connect() as conn:
            oldest = conn.scalar(select(func.min(rollup_pending.c.bucket)))
        return None if oldest is None else float(oldest)

    def _repair(self, stale_before: float) -> int:
        """Roll again from the raw samples each minute a process marked and never flushed (it died), replacing what
        the live ones flushed of it; its pending rows go in the same transaction."""
        with self._engine.connect() as conn:
            stale = [
                float(b)
                for b in conn.scalars(
                    select(rollup_pending.c.bucket).where(rollup_pending.c.bucket < stale_before).distinct()
                )
            ]
        written = 0
        for bucket in sorted(stale):
            log.warning("rollups: minute %.0f was held by a process that never flushed it; rolling it again", bucket)
            with self._engine.begin() as conn:
                conn.execute(delete(rollup_pending).where(rollup_pending.c.bucket == bucket))
                where = and_(samples.c.ts >= bucket, samples.c.ts < bucket + ROLLUP_BUCKET_SECONDS)
                rows = rollup_rows(read_raw(conn, where), self._skipped)
                if rows:
                    conn.execute(self._upsert, rows)
            written += len(rows)
        return written

    def _logged(self, report: RollupReport) -> RollupReport:
        if report.buckets_written or report.backlog_processed:
            log.info(
                "rollups: wrote %d buckets, re-rolled %d backlog entries, watermark %s",
                report.buckets_written,
                report.backlog_processed,
                report.watermark,
            )
        return report

    def _read_watermark(self) -> float | None:
        with self._engine.connect() as conn:
            value = conn.scalar(select(job_state.c.watermark).where(job_state.c.name == WATERMARK_NAME))
        return None if value is None else float(value)

    def _range_start(self, previous: float | None) -> float | None:
        """Where this run starts: the lookback before the watermark, or the earliest sample's minute on a first run."""
        if previous is not None:
            # watermark 3600, lookback 120 → re-roll from 3480, taking in samples up to two minutes late
            return bucket_start(previous - self._lookback_seconds)
        with self._engine.connect() as conn:
            earliest = conn.scalar(select(func.min(samples.c.ts)))
        return None if earliest is None else bucket_start(float(earliest))

    def _roll_range(self, start: float, end: float, previous: float | None) -> tuple[int, float]:
        """Roll the minutes in [start, end) chunk by chunk, skipping stretches without samples; the new watermark."""
        written = 0
        cursor = start
        stored = previous
        watermark = end if previous is None else max(previous, end)
        while cursor < end:
            first = self._first_sample_ts(cursor, end)
            if first is None:
                break
            # cursor 0, first sample at 7 300.5, chunk 600 → roll [7 260, 7 860) next, not 12 empty chunks
            low = max(cursor, bucket_start(first))
            high = min(low + self._chunk_seconds, end)
            with self._engine.begin() as conn:
                rows = rollup_rows(read_raw(conn, and_(samples.c.ts >= low, samples.c.ts < high)), self._skipped)
                if rows:
                    conn.execute(self._upsert, rows)
                if stored is None or high > stored:
                    self._write_watermark(conn, high)  # progress survives a crash halfway through a long catch-up
                    stored = high
            written += len(rows)
            cursor = high
        if stored is None or watermark > stored:
            with self._engine.begin() as conn:
                self._write_watermark(conn, watermark)
        return written, watermark

    def _first_sample_ts(self, low: float, high: float) -> float | None:
        with self._engine.connect() as conn:
            first = conn.scalar(select(func.min(samples.c.ts)).where(samples.c.ts >= low, samples.c.ts < high))
        return None if first is None else float(first)

    def _write_watermark(self, conn: Connection, watermark: float) -> None:
        conn.execute(self._store_watermark, [{"name": WATERMARK_NAME, "watermark": watermark}])

    def _roll_backlog(self, end: float, remote_end: float) -> tuple[int, int]:
        """Re-roll backlog (node, minute) pairs of minutes before ``end`` (before ``remote_end`` for the nodes whose
        samples come by remote write or OTLP) in batches; (pairs processed, rows written)."""
        processed = written = 0
        while True:
            with self._engine.begin() as conn:
                pairs = [(str(n), float(b)) for n, b in self._next_backlog(conn, end, remote_end)]
                if not pairs:
                    break
                written += self._reroll_pairs(conn, pairs)
            processed += len(pairs)
        return processed, written

    def _next_backlog(self, conn: Connection, end: float, remote_end: float) -> Sequence[Any]:
        remote = select(nodes.c.id).where(nodes.c.source != AGENT_SOURCE)
        stmt = (
            select(rollup_backlog.c.node_id, rollup_backlog.c.bucket)
            .where(
                or_(
                    rollup_backlog.c.bucket < end,
                    and_(rollup_backlog.c.bucket < remote_end, rollup_backlog.c.node_id.in_(remote)),
                )
            )
            .order_by(rollup_backlog.c.node_id, rollup_backlog.c.bucket)
            .limit(self._backlog_batch)
        )
        return conn.execute(stmt).all()

    def _reroll_pairs(self, conn: Connection, pairs: Sequence[tuple[str, float]]) -> int:
        """Delete the pairs' backlog rows, then roll their samples, in the caller's transaction.

        Deleting first takes the write lock (SQLite) or the rows' locks (PostgreSQL) before the samples are read,
        so a sample committed meanwhile either is read here or re-marks its minute for the next run.
        """
        conn.execute(self._delete_backlog, [{"b_node_id": n, "b_bucket": b} for n, b in pairs])
        in_pairs = or_(
            *(
                and_(samples.c.node_id == n, samples.c.ts >= b, samples.c.ts < b + ROLLUP_BUCKET_SECONDS)
                for n, b in pairs
            )
        )
        # A minute whose samples retention already removed yields no rows: its old rollup stays as it was.
        rows = rollup_rows(read_raw(conn, in_pairs), self._skipped)
        if rows:
            conn.execute(self._upsert, rows)
        return len(rows)
