"""Rollups from the write path: each minute's aggregates kept as the writer commits the rows, flushed once.

Per (node, device, pool, minute) and metric: how many values, their sum, minimum and maximum, and the ``TOP`` largest
— enough for ``rollups_1m``'s min/mean/max and an exact nearest-rank p99 (``wire.percentile``) of up to 400 values a
minute (p99 of n is the (n − ⌈0.99 n⌉ + 1)-th largest: the 2nd of an agent's 120), an upper bound past that. About
0.8 KB per series and minute, whatever the rate: no value is kept, and nothing is read back from ``samples``.

The writer feeds the rows new in each commit, after it commits (:meth:`MinuteRollups.add`), except those of minutes
already past the lateness bound (``collector.group_rows.late_buckets``: they go through the rollup backlog and are
rolled again from the raw samples); :meth:`MinuteRollups.take_closed` hands over the minutes closed
``flush_delay_seconds`` ago as ``rollups_1m`` rows, forgetting them. A minute that gets more rows after that (a push
within the lateness bound) is flushed again and merged into the stored row (``collector.rollup_flush``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from collector.batch import METRIC_COUNT
from collector.group_rows import GroupRows
from collector.rollups import bucket_start
from collector.tables import ROLLUP_BUCKET_SECONDS, rollup_column
from wire.catalog import METRIC_NAMES

TOP = 4  # the largest values kept per series, minute and metric: an exact p99 up to 400 values a minute

SeriesKey = tuple[str, int, str]  # node, device (-1: none), pool ("": none)


@dataclass
class _Minute:
    """One minute's aggregates, a row per series (``slots``), grown as series appear."""

    slots: dict[SeriesKey, int] = field(default_factory=dict)
    samples: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    count: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, METRIC_COUNT), dtype=np.int64))
    total: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, METRIC_COUNT)))
    low: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, METRIC_COUNT)))
    high: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, METRIC_COUNT, TOP)))  # descending

    def slot_of(self, keys: list[SeriesKey]) -> NDArray[np.intp]:
        """Each key's row, new keys given new rows."""
        before = len(self.slots)
        out = np.fromiter((self.slots.setdefault(k, len(self.slots)) for k in keys), dtype=np.intp, count=len(keys))
        grown = len(self.slots) - before
        if grown:
            self.samples = np.concatenate([self.samples, np.zeros(grown, dtype=np.int64)])
            self.count = np.concatenate([self.count, np.zeros((grown, METRIC_COUNT), dtype=np.int64)])
            self.total = np.concatenate([self.total, np.zeros((grown, METRIC_COUNT))])
            self.low = np.concatenate([self.low, np.full((grown, METRIC_COUNT), np.inf)])
            self.high = np.concatenate([self.high, np.full((grown, METRIC_COUNT, TOP), -np.inf)])
        return out

    def add(self, slots: NDArray[np.intp], values: NDArray[np.float64]) -> None:
        """Fold rows (``slots[i]``: row i's series, ``values[i]``: its metrics, NaN absent) into the aggregates."""
        present = ~np.isnan(values)
        np.add.at(self.samples, slots, 1)
        np.add.at(self.count, slots, present)
        np.add.at(self.total, slots, np.where(present, values, 0.0))
        np.minimum.at(self.low, slots, np.where(present, values, np.inf))
        for metric in range(METRIC_COUNT):
            self._keep_largest(slots, values[:, metric], metric)

    def _keep_largest(self, slots: NDArray[np.intp], values: NDArray[np.float64], metric: int) -> None:
        """The ``TOP`` largest values of each series so far: the kept ones and the new ones, sorted per series."""
        carried = ~np.isnan(values)
        if not carried.any():
            return
        touched = np.unique(slots[carried])
        kept = self.high[touched, metric, :]
        slot = np.concatenate([np.repeat(touched, TOP), slots[carried]])
        value = np.concatenate([kept.ravel(), values[carried]])
        order = np.lexsort((-value, slot))
        slot, value = slot[order], value[order]
        first = np.searchsorted(slot, slot, side="left")
        rank = np.arange(len(slot)) - first
        best = rank < TOP
        self.high[slot[best], metric, rank[best]] = value[best]

    def rows(self, bucket: float) -> list[dict[str, Any]]:
        """One ``rollups_1m`` row per series: NULL where no sample carried the metric (never 0)."""
        out = []
        count, total, low, high = self.count.tolist(), self.total.tolist(), self.low.tolist(), self.high.tolist()
        for (node_id, device, pool), slot in self.slots.items():
            row: dict[str, Any] = {"node_id": node_id, "device": device, "pool": pool, "bucket": bucket}
            row["samples"] = int(self.samples[slot])
            for metric, name in enumerate(METRIC_NAMES):
                n = count[slot][metric]
                stats = (
                    (low[slot][metric], total[slot][metric] / n, high[slot][metric][0], _p99(high[slot][metric], n))
                    if n
                    else (None, None, None, None)
                )
                for stat, value in zip(("min", "mean", "max", "p99"), stats, strict=True):
                    row[rollup_column(name, stat)] = value
            out.append(row)
        return out


def _p99(largest: list[float], count: int) -> float:
    """Nearest-rank p99 of ``count`` values from their largest, descending: 120 values → the 2nd largest; past what
    ``TOP`` holds, the smallest kept (an upper bound)."""
    from_top = count - max(1, math.ceil(0.99 * count))
    return largest[min(from_top, TOP - 1)]


@dataclass(frozen=True)
class ClosedMinutes:
    """Minutes taken to flush: every one this process marked (``buckets``), with the aggregates of those it holds."""

    buckets: list[float]
    minutes: dict[float, _Minute]

    def rows(self) -> list[dict[str, Any]]:
        return [row for bucket, minute in sorted(self.minutes.items()) for row in minute.rows(bucket)]


class MinuteRollups:
    """A server process's minute aggregates (module docstring); thread-safe (the writer adds, a job takes)."""

    def __init__(self, holder: str, *, flush_delay_seconds: float = 10.0) -> None:
        self.holder = holder  # names this process's rows in ``rollup_pending``
        self._flush_delay_seconds = flush_delay_seconds
        self._minutes: dict[float, _Minute] = {}
        self._marked: set[float] = set()  # minutes this process has a rollup_pending row for
        self._lock = threading.Lock()

    def unmarked(self, buckets: set[float]) -> list[float]:
        """Of ``buckets`` (a commit's minutes to fold), those this process has no pending row for yet: the writer
        inserts them in the same transaction and calls :meth:`marked` once it committed."""
        with self._lock:
            return sorted(buckets - self._marked)

    def marked(self, buckets: list[float]) -> None:
        with self._lock:
            self._marked.update(buckets)

    def add(self, rows: GroupRows, chosen: NDArray[np.intp]) -> None:
        """Fold the committed rows ``chosen`` of a group into their minutes."""
        if not len(chosen):
            return
        buckets = np.floor_divide(rows.ts[chosen], ROLLUP_BUCKET_SECONDS) * ROLLUP_BUCKET_SECONDS
        with self._lock:
            for bucket in np.unique(buckets).tolist():
                mine = chosen[buckets == bucket]
                keys = [
                    (rows.node_ids[n], d, rows.pool_names[p])
                    for n, d, p in zip(
                        rows.node[mine].tolist(), rows.device[mine].tolist(), rows.pool[mine].tolist(), strict=True
                    )
                ]
                minute = self._minutes.setdefault(bucket, _Minute())
                minute.add(minute.slot_of(keys), rows.values[mine])

    def take_closed(self, now: float) -> ClosedMinutes:
        """The minutes closed ``flush_delay_seconds`` before ``now`` that this process marked, forgotten here: the
        caller flushes them (deleting their pending rows) or hands them back with :meth:`put_back`."""
        closed_before = bucket_start(now - self._flush_delay_seconds)
        with self._lock:
            due = sorted(b for b in self._marked if b < closed_before)
            minutes = {b: self._minutes.pop(b) for b in due if b in self._minutes}
            self._marked.difference_update(due)
        return ClosedMinutes(due, minutes)

    def put_back(self, closed: ClosedMinutes) -> None:
        """Minutes taken whose flush failed (the database away): held again, to flush at the next run."""
        with self._lock:
            for bucket, minute in closed.minutes.items():
                held = self._minutes.get(bucket)
                self._minutes[bucket] = minute if held is None else _merged(minute, held)
            self._marked.update(closed.buckets)

    @property
    def held_minutes(self) -> int:
        with self._lock:
            return len(self._minutes)


def _merged(a: _Minute, b: _Minute) -> _Minute:
    """Two aggregates of one minute as one (a flush put back while new rows came in)."""
    keys = list(b.slots)
    slots = a.slot_of(keys)
    order = np.array([b.slots[k] for k in keys], dtype=np.intp)
    a.samples[slots] += b.samples[order]
    a.count[slots] += b.count[order]
    a.total[slots] += b.total[order]
    a.low[slots] = np.minimum(a.low[slots], b.low[order])
    for metric in range(METRIC_COUNT):
        values = b.high[order, metric, :]
        a._keep_largest(np.repeat(slots, TOP), values.ravel(), metric)
    return a
