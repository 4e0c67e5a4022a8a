"""Series queries (``GET /api/v1/series``): raw samples for short ranges, 1-minute rollups for long ones.

A long range's newest minutes are not rolled up yet (the rollup job rolls each minute after it closes): they come
from the raw samples past the rollup watermark, reduced per minute as the job would, so a fresh sample is in the
answer whatever the range.

Points of several series (a pool's replicas, a node's GPUs) are first bucketed per series by ``step`` with ``stat``,
then combined per bucket as the catalog says: a pool's request rate is the sum over replicas, its p99 the max.

Every read bounds ``ts`` (or ``bucket``) on both sides with plain comparisons: on PostgreSQL that is what lets the
planner read only the partitions in range (``collector.partitions``; tests/collector/test_partitions.py EXPLAINs it),
so a new query here must keep such bounds rather than, say, a function of the column.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Engine, Select, Table, func, select

from collector.aggregate import Stat, combine_series, reduce_rollups, reduce_values
from collector.errors import InvalidQuery
from collector.rollups import WATERMARK_NAME, bucket_start
from collector.tables import (
    NO_DEVICE,
    NO_POOL,
    ROLLUP_BUCKET_SECONDS,
    job_state,
    replica_reports,
    rollup_column,
    rollups_1m,
    samples,
)
from wire.catalog import BY_NAME, METRICS, PoolAggregate

MAX_POINTS = 11_000
DEFAULT_RAW_STEP_SECONDS = 1.0

Point = tuple[float, float]
SeriesKey = tuple[str, int, str]
Reducer = Callable[[Sequence[float]], float]


class Source(StrEnum):
    RAW = "raw"
    ROLLUP = "rollup"


@dataclass(frozen=True)
class SeriesQuery:
    metric: str
    start: float
    end: float
    node: str | None = None
    device: int | None = None
    pool: str | None = None
    step: float | None = None
    stat: Stat = Stat.MEAN

    def __post_init__(self) -> None:
        if self.metric not in BY_NAME:
            raise InvalidQuery("metric", f"unknown metric {self.metric!r}")
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end <= self.start:
            raise InvalidQuery(None, f"start/end: end ({self.end}) must be after start ({self.start})")
        if self.step is not None and not (self.step > 0 and math.isfinite(self.step)):
            raise InvalidQuery("step", f"must be a positive number of seconds, got {self.step}")
        if self.step is not None and (self.end - self.start) / self.step > MAX_POINTS:
            raise InvalidQuery("step", f"{self.step} s gives more than {MAX_POINTS} points over this range")


@dataclass(frozen=True)
class SeriesResult:
    source: Source
    step: float | None
    points: list[Point]


def choose_source(query: SeriesQuery, *, raw_max_seconds: float) -> Source:
    return Source.RAW if query.end - query.start <= raw_max_seconds else Source.ROLLUP


def query_series(conn: Connection, query: SeriesQuery, *, raw_max_seconds: float) -> SeriesResult:
    source = choose_source(query, raw_max_seconds=raw_max_seconds)
    if source is Source.RAW:
        by_series = _raw_points(conn, query, query.start)
    else:
        tail_start = raw_tail_start(conn, query, raw_max_seconds=raw_max_seconds)
        by_series = _rollup_points(conn, query, tail_start)
        for key, minutes in _raw_minutes(conn, query, tail_start).items():
            by_series[key].extend(minutes)
    step = query.step
    if step is None and source is Source.ROLLUP:
        step = ROLLUP_BUCKET_SECONDS
    if step is None and len(by_series) > 1:
        step = DEFAULT_RAW_STEP_SECONDS
    how = BY_NAME[query.metric].pool_aggregate
    if step is None:
        points = next(iter(by_series.values()), [])
    else:
        reduce = reduce_values if source is Source.RAW else reduce_rollups
        points = combine_buckets(
            (bucketize(p, step, lambda vs: reduce(vs, query.stat)) for p in by_series.values()), how
        )
    return SeriesResult(source, step, points)


def raw_tail_start(conn: Connection, query: SeriesQuery, *, raw_max_seconds: float) -> float:
    """The minute from which a rollup answer reads raw samples instead: the rollup watermark (every minute before it
    is rolled; none is before the first run), no earlier than the query's first whole minute (as for rollups, a
    minute counts when it starts in the range), and reading at most ``raw_max_seconds`` of raw samples, as a raw
    query would: a stalled rollup job leaves a gap before the last hour rather than a scan of days of samples."""
    watermark = conn.scalar(select(job_state.c.watermark).where(job_state.c.name == WATERMARK_NAME))
    rolled_until = -math.inf if watermark is None else float(watermark)
    return max(rolled_until, _minute_ceil(query.start), _minute_ceil(query.end - raw_max_seconds))


def _minute_ceil(ts: float) -> float:
    """The first minute start at or after ``ts``: 120.0 → 120.0, 120.5 → 180.0."""
    start = bucket_start(ts)
    return start if start == ts else start + ROLLUP_BUCKET_SECONDS


def _raw_points(conn: Connection, query: SeriesQuery, start: float) -> dict[SeriesKey, list[Point]]:
    """Raw samples of the query's metric in [start, query.end], per series, oldest first."""
    value = samples.c[query.metric]
    where = (samples.c.ts >= start, samples.c.ts <= query.end, value.is_not(None))
    return _points(conn, _filtered(select(*_series_key(samples), samples.c.ts, value).where(*where), samples, query))


def _rollup_points(conn: Connection, query: SeriesQuery, before: float) -> dict[SeriesKey, list[Point]]:
    """The query's stat of each 1-minute rollup starting in [query.start, query.end] and before ``before``."""
    bucket, value = rollups_1m.c.bucket, rollups_1m.c[rollup_column(query.metric, query.stat.value)]
    where = (bucket >= query.start, bucket <= query.end, bucket < before, value.is_not(None))
    return _points(conn, _filtered(select(*_series_key(rollups_1m), bucket, value).where(*where), rollups_1m, query))


def _raw_minutes(conn: Connection, query: SeriesQuery, start: float) -> dict[SeriesKey, list[Point]]:
    """Raw samples from ``start`` on, reduced per series and minute with the query's stat, as the rollup job will
    reduce them: points that stand beside the rollups' (nothing is read when ``start`` is past the range)."""
    if start > query.end:
        return {}
    minutes: dict[SeriesKey, list[Point]] = {}
    for key, points in _raw_points(conn, query, start).items():
        by_minute: dict[float, list[float]] = defaultdict(list)
        for ts, value in points:
            by_minute[bucket_start(ts)].append(value)  # the job's minute, not bucketize's float division
        minutes[key] = [(minute, reduce_values(values, query.stat)) for minute, values in by_minute.items()]
    return minutes


def _series_key(table: Table) -> tuple[Any, ...]:
    return (table.c.node_id, table.c.device, table.c.pool)


def _points(conn: Connection, stmt: Select[Any]) -> dict[SeriesKey, list[Point]]:
    """Rows of (node_id, device, pool, ts, value) as points per series, in time order."""
    by_series: dict[SeriesKey, list[Point]] = defaultdict(list)
    for row in conn.execute(stmt.order_by(stmt.selected_columns[3])):
        by_series[(row[0], row[1], row[2])].append((float(row[3]), float(row[4])))
    return by_series


def _filtered(stmt: Select[Any], table: Table, query: SeriesQuery) -> Select[Any]:
    if query.node is not None:
        stmt = stmt.where(table.c.node_id == query.node)
    if query.device is not None:
        stmt = stmt.where(table.c.device == query.device)
    if query.pool is not None:
        stmt = stmt.where(table.c.pool == query.pool)
    return stmt


def bucketize(points: Iterable[Point], step: float, reduce: Reducer) -> dict[float, float]:
    """One value per bucket ``[k × step, (k+1) × step)``, keyed by the bucket's start."""
    buckets: dict[float, list[float]] = defaultdict(list)
    for ts, value in points:
        buckets[math.floor(ts / step) * step].append(value)
    return {start: reduce(values) for start, values in buckets.items()}


def combine_buckets(per_series: Iterable[dict[float, float]], how: PoolAggregate) -> list[Point]:
    """Bucket-aligned series combined into one, sorted by time."""
    merged: dict[float, list[float]] = defaultdict(list)
    for series in per_series:
        for start, value in series.items():
            merged[start].append(value)
    return [(start, combine_series(values, how)) for start, values in sorted(merged.items())]


def series_rollups(
    conn: Connection, node_ids: Sequence[str], start: float, end: float
) -> dict[SeriesKey, dict[str, list[Point]]]:
    """Per series (node, device, pool) of ``node_ids`` and per metric, the 1-minute means in [start, end], oldest
    first (the dashboard's last hour of a node: at most 60 rows per series, never the raw samples)."""
    if not node_ids:
        return {}
    means = [rollups_1m.c[rollup_column(m.name, Stat.MEAN.value)] for m in METRICS]
    key = (rollups_1m.c.node_id, rollups_1m.c.device, rollups_1m.c.pool)
    stmt = (
        select(*key, rollups_1m.c.bucket, *means)
        .where(rollups_1m.c.node_id.in_(list(node_ids)), rollups_1m.c.bucket >= start, rollups_1m.c.bucket <= end)
        .order_by(rollups_1m.c.bucket)
    )
    out: dict[SeriesKey, dict[str, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for row in conn.execute(stmt):
        for m, value in zip(METRICS, row[4:], strict=True):
            if value is not None:
                out[(row[0], row[1], row[2])][m.name].append((float(row[3]), float(value)))
    return {k: dict(v) for k, v in out.items()}


def series_samples(
    conn: Connection, node_id: str, after: float, end: float, *, limit: int = MAX_POINTS * 8
) -> dict[SeriesKey, dict[str, list[Point]]]:
    """Per series (node, device, pool) of ``node_id`` and per metric, the raw samples in (after, end], oldest first
    (the dashboard's last 15 minutes at the sampling rate, and each live update's new samples); at most ``limit``
    rows, the oldest first, so a caller that got ``limit`` rows asks again from the last one's ``ts``."""
    values = [samples.c[m.name] for m in METRICS]
    stmt = (
        select(*_series_key(samples), samples.c.ts, *values)
        .where(samples.c.node_id == node_id, samples.c.ts > after, samples.c.ts <= end)
        .order_by(samples.c.ts)
        .limit(limit)
    )
    rows: dict[SeriesKey, list[Any]] = defaultdict(list)
    for row in conn.execute(stmt).all():  # all at once: row by row costs a fetch call per row
        rows[(row[0], row[1], row[2])].append(row)
    out: dict[SeriesKey, dict[str, list[Point]]] = {}
    for key, found in rows.items():  # a series' rows as columns: 15 minutes of one node is 7,200 rows × 12 metrics
        columns = list(zip(*found, strict=True))
        times = columns[3]  # Double columns come back as floats
        metrics = {}
        for m, column in zip(METRICS, columns[4:], strict=True):
            points = [(ts, v) for ts, v in zip(times, column, strict=True) if v is not None]
            if points:
                metrics[m.name] = points
        out[key] = metrics
    return out


def recent_section_rollups(
    conn: Connection, sections: Mapping[str, Sequence[str | None]], start: float, end: float
) -> dict[tuple[str, str | None], dict[str, list[Point]]]:
    """Per (node, pool) of ``sections`` (node → the pools whose view of it is wanted) and metric, the 1-minute means
    in [start, end], combined as the catalog says over the series that view holds: the node's GPUs and host and
    that pool's replicas; pool None: all its series (the overview's sparklines: 12 metrics × 30 buckets a tile)."""
    by_bucket: dict[tuple[str, str | None, str], list[dict[float, float]]] = defaultdict(list)
    for (node, device, pool), metrics in series_rollups(conn, list(sections), start, end).items():
        for section in sections[node]:
            if section is not None and device == NO_DEVICE and pool not in (NO_POOL, section):
                continue  # another pool's replicas
            for name, points in metrics.items():
                by_bucket[(node, section, name)].append(dict(points))
    out: dict[tuple[str, str | None], dict[str, list[Point]]] = defaultdict(dict)
    for (node, section, name), per_series in by_bucket.items():
        out[(node, section)][name] = combine_buckets(per_series, BY_NAME[name].pool_aggregate)
    return dict(out)


def recent_node_rollups(
    conn: Connection, node_ids: Sequence[str], start: float, end: float
) -> dict[str, dict[str, list[Point]]]:
    """Per node and metric, the 1-minute means in [start, end], combined over all the node's series."""
    found = recent_section_rollups(conn, {node: [None] for node in node_ids}, start, end)
    return {node: metrics for (node, _pool), metrics in found.items()}


@dataclass(frozen=True)
class WindowStats:
    """One series over a window of rollups: each metric's mean of means and max of maxima (absent: not measured)."""

    node_id: str
    device: int | None
    pool: str | None
    mean: dict[str, float]
    peak: dict[str, float]


def window_stats(conn: Connection, start: float, end: float) -> list[WindowStats]:
    """Every series with rollups in [start, end), one row each, aggregated in the database (the health report)."""
    key = (rollups_1m.c.node_id, rollups_1m.c.device, rollups_1m.c.pool)
    means = [func.avg(rollups_1m.c[rollup_column(m.name, Stat.MEAN.value)]) for m in METRICS]
    peaks = [func.max(rollups_1m.c[rollup_column(m.name, Stat.MAX.value)]) for m in METRICS]
    stmt = select(*key, *means, *peaks).where(rollups_1m.c.bucket >= start, rollups_1m.c.bucket < end).group_by(*key)
    found = []
    count = len(METRICS)
    for row in conn.execute(stmt):
        mean = {m.name: float(v) for m, v in zip(METRICS, row[3 : 3 + count], strict=True) if v is not None}
        peak = {m.name: float(v) for m, v in zip(METRICS, row[3 + count :], strict=True) if v is not None}
        device = None if row[1] == NO_DEVICE else int(row[1])
        found.append(WindowStats(row[0], device, None if row[2] == NO_POOL else row[2], mean, peak))
    return found


def pool_replica_history(
    conn: Connection, pool: str, start: float, end: float, step: float
) -> list[tuple[float, int, int]]:
    """(bucket start, ready, starting) of ``pool`` over time, summed over nodes: a node that reports its replicas
    (``replica_reports``) counts its last report in the bucket; a node that never did over the range (a Prometheus
    or OTLP sender: its engine is the replica) counts one ready replica in each bucket its pool series has a
    rolled-up minute in, as the fleet view counts it now (:func:`pools_on_nodes`). Buckets with neither are left
    out."""
    c = replica_reports.c
    stmt = select(c.node_id, c.ts, c.ready, c.starting).where(c.pool == pool, c.ts >= start, c.ts <= end).order_by(c.ts)
    last: dict[tuple[float, str], tuple[int, int]] = {}
    for node_id, ts, ready, starting in conn.execute(stmt):
        last[(math.floor(ts / step) * step, node_id)] = (ready, starting)
    reporting = {node for _bucket, node in last}
    r = rollups_1m.c
    served = (
        select(r.bucket, r.node_id)
        .where(r.pool == pool, r.device == NO_DEVICE, r.bucket >= start, r.bucket <= end)
        .distinct()
    )
    for bucket, node_id in conn.execute(served):
        if node_id not in reporting:
            last[(math.floor(bucket / step) * step, node_id)] = (1, 0)
    totals: dict[float, tuple[int, int]] = defaultdict(lambda: (0, 0))
    for (bucket, _node), (ready, starting) in last.items():
        total = totals[bucket]
        totals[bucket] = (total[0] + ready, total[1] + starting)
    return [(bucket, ready, starting) for bucket, (ready, starting) in sorted(totals.items())]


class SeriesReader:
    """The stored series as the API and the dashboard read them, each read in a connection of its own (a job that
    reads more in one snapshot calls the functions above on its connection)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def query(self, query: SeriesQuery, *, raw_max_seconds: float) -> SeriesResult:
        with self._engine.connect() as conn:
            return query_series(conn, query, raw_max_seconds=raw_max_seconds)

    def samples(self, node_id: str, after: float, end: float) -> dict[SeriesKey, dict[str, list[Point]]]:
        """:func:`series_samples` of one node."""
        with self._engine.connect() as conn:
            return series_samples(conn, node_id, after, end)

    def rollups(self, node_ids: Sequence[str], start: float, end: float) -> dict[SeriesKey, dict[str, list[Point]]]:
        """:func:`series_rollups` of ``node_ids``."""
        with self._engine.connect() as conn:
            return series_rollups(conn, node_ids, start, end)

    def pool_history(
        self, query: SeriesQuery, pool: str, *, raw_max_seconds: float, replica_step: float
    ) -> tuple[list[Point], list[tuple[float, int, int]]]:
        """A pool's demand over ``query``'s range and its (bucket, ready, starting) history, in one snapshot (the
        dashboard's pool charts)."""
        with self._engine.connect() as conn:
            found = query_series(conn, query, raw_max_seconds=raw_max_seconds)
            points = found.points
            earliest = points[0][0] if points else query.end
            if found.source is Source.RAW and query.start < earliest - ROLLUP_BUCKET_SECONDS:
                # minutes before the raw samples (history imported as rollups, samples past retention): their
                # 1-minute means
                minutes = query_series(conn, replace(query, step=None), raw_max_seconds=0.0).points
                points = [p for p in minutes if not points or p[0] + ROLLUP_BUCKET_SECONDS <= points[0][0]] + points
            history = pool_replica_history(conn, pool, query.start, query.end, replica_step)
        return points, history
