"""The demo's history: the trace's hours before the replayed day, written as 1-minute rollups that end at "now", so
the first forecast (20 s in) has hours of a pool's demand to fit and the pool page shows a forecast and its band in
the first minute instead of after three rolled-up minutes.

Each minute becomes one rollup row per node the pool runs on (its demand split evenly: the pool's demand is the sum
over its nodes), built by the rollup job's own reduction (``collector.rollups.rollup_rows``) from one reading of
``request_rate_per_second`` in the middle of the minute; every other metric is absent (NULL), as it was not measured.

Idempotent across restarts: only the minutes before the pool's first data in the window (rollups or raw samples) are
written, so a second run writes nothing over what the first seeded or the agents measured, and the current, still
open minute is never seeded. On a database whose rollup job never ran, the rollup watermark is set to the end of the
seeded minutes, which is where the forecast loop's history ends until the job's first run passes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, func, select

from collector.database import insert_for
from collector.rollups import WATERMARK_NAME, bucket_start, rollup_rows
from collector.tables import NO_DEVICE, ROLLUP_BUCKET_SECONDS, job_state, rollups_1m, samples
from wire.catalog import METRIC_NAMES

DEMAND_METRIC = "request_rate_per_second"


@dataclass(frozen=True)
class SeededHistory:
    """What one call wrote: rollup rows, over minutes [start, end) (start == end: nothing was left to seed)."""

    rows: int
    start: float
    end: float

    @property
    def minutes(self) -> int:
        return round((self.end - self.start) / ROLLUP_BUCKET_SECONDS)


def seed_history(
    engine: Engine, pool: str, per_minute: Sequence[float], nodes: Sequence[str], *, now: float
) -> SeededHistory:
    """``per_minute`` (the pool's demand, oldest first) as the minutes that end at ``now``'s minute, split over
    ``nodes``; minutes from the pool's first data in that window on are left as they are."""
    if not nodes:
        raise ValueError("nodes: the history needs at least one node to belong to")
    if any(not math.isfinite(v) or v < 0 for v in per_minute):
        raise ValueError(f"per_minute: demand must be finite and >= 0 ({pool})")
    end = bucket_start(now)
    start = end - len(per_minute) * ROLLUP_BUCKET_SECONDS
    with engine.begin() as conn:
        first = _first_data(conn, pool, start, end)
        stop = end if first is None else bucket_start(first)
        raw = [
            _reading(node, pool, bucket + ROLLUP_BUCKET_SECONDS / 2, value / len(nodes))
            for minute, value in enumerate(per_minute)
            if (bucket := start + minute * ROLLUP_BUCKET_SECONDS) < stop
            for node in nodes
        ]
        rows = rollup_rows(raw)
        if rows:
            conn.execute(insert_for(engine, rollups_1m).on_conflict_do_nothing(), rows)
        if conn.scalar(select(job_state.c.watermark).where(job_state.c.name == WATERMARK_NAME)) is None and rows:
            conn.execute(job_state.insert(), [{"name": WATERMARK_NAME, "watermark": stop}])
    return SeededHistory(len(rows), start, max(start, stop))


def _first_data(conn: Connection, pool: str, start: float, end: float) -> float | None:
    """The earliest rollup minute or raw sample of ``pool`` in [start, end), None when it has none there."""
    rolled = conn.scalar(
        select(func.min(rollups_1m.c.bucket)).where(
            rollups_1m.c.pool == pool, rollups_1m.c.bucket >= start, rollups_1m.c.bucket < end
        )
    )
    sampled = conn.scalar(
        select(func.min(samples.c.ts)).where(samples.c.pool == pool, samples.c.ts >= start, samples.c.ts < end)
    )
    found = [float(v) for v in (rolled, sampled) if v is not None]
    return min(found) if found else None


def _reading(node: str, pool: str, ts: float, demand: float) -> tuple[object, ...]:
    """One raw row as ``collector.rollups.RAW_COLUMNS`` lays it out: the series key, ts, the catalog's metrics."""
    return (node, NO_DEVICE, pool, ts, *(demand if name == DEMAND_METRIC else None for name in METRIC_NAMES))
