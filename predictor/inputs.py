"""What the forecast loop reads from storage: regular 1-minute histories and per-replica capacity observations.

Histories come from the 1-minute rollups (the mean of each minute), laid on a regular grid from ``start`` to the last
rolled-up minute; a minute without any row is NaN — an agent away or a collection gap — never zero load. A pool's
demand is the sum over the nodes that report it, as the catalog says for rates.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, and_, func, or_, select, union_all

from collector.rollups import WATERMARK_NAME
from collector.tables import (
    AGENT_SOURCE,
    NO_DEVICE,
    NO_POOL,
    ROLLUP_BUCKET_SECONDS,
    devices,
    job_state,
    nodes,
    replica_reports,
    rollup_column,
    rollups_1m,
)
from collector.tables import samples as raw_samples
from predictor.base import History
from predictor.capacity import ReplicaObservation

STEP_SECONDS = ROLLUP_BUCKET_SECONDS
LATENCY_METRIC = "request_latency_p99_seconds"
# One raw pool sample of an agent in this many feeds the capacity learner: at 2 Hz per node an hour is 720 rows per
# node. A remote-write or OTLP node's samples come a scrape apart (15 s by default): every one of them counts.
CAPACITY_SAMPLE_EVERY = 5


@dataclass(frozen=True)
class Window:
    """Rolled-up minutes [start, end): ``end`` is the rollup watermark (the first minute not yet rolled up)."""

    start: float
    end: float

    @property
    def steps(self) -> int:
        return max(0, round((self.end - self.start) / STEP_SECONDS))


def rollup_window(conn: Connection, *, now: float, history_seconds: float) -> Window | None:
    """The last ``history_seconds`` of closed, rolled-up minutes; None before the first rollup run."""
    watermark = conn.scalar(select(job_state.c.watermark).where(job_state.c.name == WATERMARK_NAME))
    if watermark is None:
        return None
    end = min(float(watermark), math.floor(now / STEP_SECONDS) * STEP_SECONDS)
    return Window(end - math.ceil(history_seconds / STEP_SECONDS) * STEP_SECONDS, end)


def _grid(window: Window, points: Iterable[tuple[float, float]]) -> History:
    """Points summed per minute on the window's grid, from the first observed minute on (NaN where none came)."""
    values = np.full(window.steps, np.nan)
    for bucket, value in points:
        index = round((bucket - window.start) / STEP_SECONDS)
        if 0 <= index < window.steps:
            values[index] = value if math.isnan(values[index]) else values[index] + value
    observed = np.flatnonzero(np.isfinite(values))
    first = int(observed[0]) if len(observed) else 0  # a pool that began an hour ago has an hour of history
    return History(values[first:], STEP_SECONDS, window.start + first * STEP_SECONDS)


def pools_seen(conn: Connection, window: Window) -> set[str]:
    """Pools that reported anything in the window."""
    query = select(rollups_1m.c.pool).where(rollups_1m.c.bucket >= window.start, rollups_1m.c.pool != NO_POOL)
    return set(conn.scalars(query.distinct()))


def pool_demand(conn: Connection, pool: str, metric: str, window: Window) -> History:
    """The pool's demand per minute: the sum over its nodes of each node's mean rate in that minute."""
    column = rollups_1m.c[rollup_column(metric, "mean")]
    query = (
        select(rollups_1m.c.bucket, func.sum(column))
        .where(
            rollups_1m.c.pool == pool,
            rollups_1m.c.bucket >= window.start,
            rollups_1m.c.bucket < window.end,
            column.is_not(None),
        )
        .group_by(rollups_1m.c.bucket)
    )
    return _grid(window, ((float(b), float(v)) for b, v in conn.execute(query)))


def recent_pool_demand(engine: Engine, pool: str, metric: str, *, now: float, history_seconds: float) -> History | None:
    """:func:`pool_demand` over the last ``history_seconds`` of rolled-up minutes, in one snapshot (the capacity
    plan's input); None before the first rollup run."""
    with engine.connect() as conn:
        window = rollup_window(conn, now=now, history_seconds=history_seconds)
        return None if window is None else pool_demand(conn, pool, metric, window)


def _max_per_minute(conn: Connection, window: Window, metric: str, scope: str) -> dict[tuple[Any, Any], History]:
    """Per (node, ``scope`` column: device or pool), the metric's per-minute max on the window's grid; series
    without that scope (``device = -1`` / ``pool = ''``) are left out."""
    column = rollups_1m.c[rollup_column(metric, "max")]
    scope_column = rollups_1m.c[scope]
    points: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    query = select(rollups_1m.c.node_id, scope_column, rollups_1m.c.bucket, column).where(
        scope_column != (NO_DEVICE if scope == "device" else NO_POOL),
        rollups_1m.c.bucket >= window.start,
        rollups_1m.c.bucket < window.end,
        column.is_not(None),
    )
    for node_id, key, bucket, value in conn.execute(query):
        points[(node_id, key)].append((float(bucket), float(value)))
    return {key: _grid(window, pts) for key, pts in points.items()}


def device_memory(conn: Connection, window: Window) -> dict[tuple[str, int], tuple[History, float]]:
    """Per (node, GPU) with a known total: used memory per minute (max of the minute) and the total, bytes."""
    totals: dict[tuple[str, int], float] = {
        (node_id, index): float(total)
        for node_id, index, total in conn.execute(
            select(devices.c.node_id, devices.c.index, devices.c.memory_total_bytes)
        )
        if total
    }
    used = _max_per_minute(conn, window, "gpu_memory_used_bytes", "device")
    return {key: (history, totals[key]) for key, history in used.items() if key in totals}


def replica_kv_cache(conn: Connection, window: Window) -> dict[tuple[str, str], History]:
    """Per (node, pool): KV-cache use per minute (max of the minute), 0..1."""
    return _max_per_minute(conn, window, "kv_cache_utilization_ratio", "pool")


def replica_observations(
    conn: Connection, pool: str, metric: str, *, start: float, end: float
) -> list[ReplicaObservation]:
    """Raw pool samples in [start, end) as (demand per ready replica, the node's p99 latency then).

    Each node's replicas of a pool are one series; the replicas ready at a sample's time are those of the node's
    latest report at or before it (``replica_reports``), and a node without one (an external engine) is one
    replica. Samples with no ready replica or no rate are left out. Two queries, whatever the number of samples.
    """
    query = select(raw_samples.c.node_id, raw_samples.c.ts, raw_samples.c[metric], raw_samples.c[LATENCY_METRIC]).where(
        raw_samples.c.pool == pool,
        raw_samples.c.ts >= start,
        raw_samples.c.ts < end,
        raw_samples.c[metric].is_not(None),
        or_(
            raw_samples.c.seq % CAPACITY_SAMPLE_EVERY == 0,
            raw_samples.c.node_id.in_(select(nodes.c.id).where(nodes.c.source != AGENT_SOURCE)),
        ),
    )
    ready_at = _ready_replicas(conn, pool, start=start, end=end)
    observations = []
    for node_id, ts, rate, latency in conn.execute(query):
        ready = ready_at(node_id, ts)
        if ready > 0:
            observations.append(ReplicaObservation(float(rate) / ready, None if latency is None else float(latency)))
    return observations


def _ready_replicas(conn: Connection, pool: str, *, start: float, end: float) -> Callable[[str, float], int]:
    """(node, time) → the ready replicas of ``pool`` the node last reported at or before that time in [start, end):
    its reports in the range and the last one before it, read in one statement; 1 before any report."""
    c = replica_reports.c
    before = (
        select(c.node_id, func.max(c.ts).label("ts")).where(c.pool == pool, c.ts < start).group_by(c.node_id).subquery()
    )
    last_before = select(c.node_id, c.ts, c.ready).join(
        before, and_(c.node_id == before.c.node_id, c.ts == before.c.ts, c.pool == pool)
    )
    in_range = select(c.node_id, c.ts, c.ready).where(c.pool == pool, c.ts >= start, c.ts < end)
    times: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, list[int]] = defaultdict(list)
    for node_id, ts, ready in conn.execute(union_all(last_before, in_range).order_by("ts")):
        times[node_id].append(float(ts))
        counts[node_id].append(int(ready))

    def ready_at(node_id: str, ts: float) -> int:
        at = bisect_right(times.get(node_id, ()), ts)
        return counts[node_id][at - 1] if at else 1

    return ready_at
