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

from sqlalchemy import Connection, Select, Table, select

from collector.aggregate import Stat, combine_series, reduce_rollups, reduce_values
from collector.catalog import BY_NAME, PoolAggregate
from collector.errors import InvalidQuery
from collector.tables import ROLLUP_BUCKET_SECONDS, rollup_column, rollups_1m, samples

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
