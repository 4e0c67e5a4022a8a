"""How values combine: over time within a bucket (mean/min/max/p99) and across series (the catalog's sum or max)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum

from wire.catalog import PoolAggregate
from wire.percentile import percentile
from wire.samples import METRIC_VALUE_MAX


class Stat(StrEnum):
    MEAN = "mean"
    MIN = "min"
    MAX = "max"
    P99 = "p99"


def reduce_values(values: Sequence[float], stat: Stat) -> float:
    """One bucket's value from its raw samples."""
    if stat is Stat.MEAN:
        return math.fsum(values) / len(values)
    if stat is Stat.MIN:
        return min(values)
    if stat is Stat.MAX:
        return max(values)
    return percentile(values, 99.0)


def reduce_rollups(values: Sequence[float], stat: Stat) -> float:
    """One coarser bucket's value from finer rollups of the same stat.

    Means average (the buckets hold about equal sample counts), minima and maxima stay exact, and the p99 of a
    coarser bucket is bounded above by the largest finer p99, which is what an SLO check wants.
    """
    return reduce_values(values, Stat.MAX if stat is Stat.P99 else stat)


def combine_series(values: Sequence[float], how: PoolAggregate) -> float:
    """One value from several series at the same time: rates and amounts add, latency and use take the max.

    Every value is taken at most ``METRIC_VALUE_MAX`` (2^63), the bound every path in now holds to, so a sum cannot
    overflow: 1.7e308 W on two GPUs, stored before the bound, raised OverflowError in every node view."""
    if how is PoolAggregate.SUM:
        return math.fsum(min(value, METRIC_VALUE_MAX) for value in values)
    return max(values)
