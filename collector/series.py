"""Series queries (``GET /api/v1/series``): raw samples for short ranges, 1-minute rollups for long ones.

Points of several series (a pool's replicas, a node's GPUs) are first bucketed per series by ``step`` with ``stat``,
then combined per bucket as the catalog says: a pool's request rate is the sum over replicas, its p99 the max.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Select, Table, func, select

from collector.aggregate import Stat, combine_series, reduce_rollups, reduce_values
from collector.catalog import BY_NAME, METRICS, PoolAggregate
from collector.errors import InvalidQuery
from collector.registry import replica_counts
from collector.tables import NO_DEVICE, NO_POOL, ROLLUP_BUCKET_SECONDS, rollup_column, rollups_1m, samples

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
            raise InvalidQuery(f"metric: unknown metric {self.metric!r}")
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end <= self.start:
            raise InvalidQuery(f"start/end: end ({self.end}) must be after start ({self.start})")
        if self.step is not None and not (self.step > 0 and math.isfinite(self.step)):
            raise InvalidQuery(f"step: must be a positive number of seconds, got {self.step}")
        if self.step is not None and (self.end - self.start) / self.step > MAX_POINTS:
            raise InvalidQuery(f"step: {self.step} s gives more than {MAX_POINTS} points over this range")


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
        table, ts_col, value_col = samples, samples.c.ts, samples.c[query.metric]
    else:
        table, ts_col = rollups_1m, rollups_1m.c.bucket
        value_col = rollups_1m.c[rollup_column(query.metric, query.stat.value)]
    stmt = (
        select(table.c.node_id, table.c.device, table.c.pool, ts_col, value_col)
        .where(ts_col >= query.start, ts_col <= query.end, value_col.is_not(None))
        .order_by(ts_col)
    )
    stmt = _filtered(stmt, table, query)
    by_series: dict[SeriesKey, list[Point]] = defaultdict(list)
    for row in conn.execute(stmt):
        by_series[(row[0], row[1], row[2])].append((float(row[3]), float(row[4])))
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


def recent_node_rollups(
    conn: Connection, node_ids: Sequence[str], start: float, end: float
) -> dict[str, dict[str, list[Point]]]:
    """Per node and metric, the 1-minute means in [start, end], combined over the node's series as the catalog says
    (the overview's sparklines: 12 metrics × 30 buckets per node)."""
    by_bucket: dict[tuple[str, str], list[dict[float, float]]] = defaultdict(list)
    for (node, _device, _pool), metrics in series_rollups(conn, node_ids, start, end).items():
        for name, points in metrics.items():
            by_bucket[(node, name)].append(dict(points))
    out: dict[str, dict[str, list[Point]]] = defaultdict(dict)
    for (node, name), per_series in by_bucket.items():
        out[node][name] = combine_buckets(per_series, BY_NAME[name].pool_aggregate)
    return dict(out)


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
    """(bucket start, ready, starting) of ``pool`` over time, summed over nodes from each node's last sample in the
    bucket (the agents' ``replicas_ready``/``replicas_starting``); buckets with no sample are left out."""
    stmt = (
        select(samples.c.node_id, samples.c.ts, samples.c.extra)
        .where(samples.c.pool == pool, samples.c.ts >= start, samples.c.ts <= end)
        .order_by(samples.c.ts)
    )
    last: dict[tuple[float, str], tuple[int, int]] = {}
    for row in conn.execute(stmt):
        last[(math.floor(row[1] / step) * step, row[0])] = replica_counts(row[2])
    totals: dict[float, tuple[int, int]] = defaultdict(lambda: (0, 0))
    for (bucket, _node), (ready, starting) in last.items():
        total = totals[bucket]
        totals[bucket] = (total[0] + ready, total[1] + starting)
    return [(bucket, ready, starting) for bucket, (ready, starting) in sorted(totals.items())]
