"""The flush of a process's closed minutes (``collector.minute_rollups``) into ``rollups_1m``: one transaction per
run that merges each series-minute into what is stored and deletes the process's pending rows of those minutes.

Merging, not replacing: a minute flushed before may get a second part (a push that arrived within the lateness bound
after the flush, or the share of a node's pushes another worker took). Counts add, minima and maxima stay exact, a
mean is weighted by the samples of each part (exact while every sample of the series carries the metric), and a p99
is the larger of the two (an upper bound, as ``collector.aggregate.reduce_rollups`` takes for coarser buckets).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Engine, case, delete
from sqlalchemy.exc import OperationalError

from collector.database import insert_for
from collector.minute_rollups import MinuteRollups
from collector.rollups import ROLLUP_KEY
from collector.tables import ROLLUP_STATS, rollup_column, rollup_pending, rollups_1m
from wire.catalog import METRIC_NAMES


class RollupFlush:
    """Flushes ``rollups``' closed minutes; each server process schedules its own (every few seconds)."""

    def __init__(self, engine: Engine, rollups: MinuteRollups) -> None:
        self._engine = engine
        self._rollups = rollups
        self._upsert = merging_upsert(engine.dialect.name)
        self._forget = delete(rollup_pending).where(rollup_pending.c.holder == rollups.holder)

    def run(self, now: float) -> int:
        """Flush the minutes closed by ``now``; the series-minutes written. A failed flush keeps them for the next."""
        closed = self._rollups.take_closed(now)
        if not closed.buckets:
            return 0
        rows = closed.rows()
        try:
            with self._engine.begin() as conn:
                if rows:
                    conn.execute(self._upsert, rows)
                conn.execute(self._forget.where(rollup_pending.c.bucket.in_(closed.buckets)))
        except OperationalError:
            self._rollups.put_back(closed)
            raise
        return len(rows)


def merging_upsert(dialect: str) -> Any:
    """Insert each row, or merge it into the stored one of its series and minute (module docstring)."""
    upsert = insert_for(dialect, rollups_1m)
    stored, new = rollups_1m.c, upsert.excluded
    merged: dict[str, ColumnElement[Any]] = {"samples": stored.samples + new.samples}
    for name in METRIC_NAMES:
        for stat in ROLLUP_STATS:
            column = rollup_column(name, stat)
            merged[column] = _merge(stat, stored[column], new[column], stored.samples, new.samples)
    return upsert.on_conflict_do_update(index_elements=list(ROLLUP_KEY), set_=merged)


def _merge(
    stat: str, old: ColumnElement[Any], new: ColumnElement[Any], old_n: ColumnElement[Any], new_n: ColumnElement[Any]
) -> ColumnElement[Any]:
    """One stat of two parts, NULL (no value in a part) taking the other's; portable CASE, no LEAST/GREATEST."""
    both: ColumnElement[Any]
    if stat == "min":
        both = case((old <= new, old), else_=new)
    elif stat == "mean":
        both = (old * old_n + new * new_n) / (old_n + new_n)
    else:  # max and p99: the larger
        both = case((old >= new, old), else_=new)
    return case((old.is_(None), new), (new.is_(None), old), else_=both)
