"""Capacity planning: the replicas, GPUs, nodes and cost a pool needs over the next week and month.

The plan starts from today's peak demand (the 99th percentile of the last day, so one spike does not buy GPUs),
grows it by the monthly growth (given, or fitted to the history), adds headroom, and divides by the per-replica
capacity: measured where the metrics gave one, else the rule of thumb of 8 GPUs per 1,000 QPS. Time and history
are passed in; nothing here reads a database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from predictor.base import FloatArray, History

RULE_OF_THUMB_GPUS_PER_1000_QPS = 8
PEAK_QUANTILE = 0.99  # at 1-minute steps the busiest 14 minutes of a day are left out of its peak
DAY_SECONDS = 86_400.0
MONTH_DAYS = 30.0
HORIZON_DAYS = {"next_week": 7.0, "next_month": MONTH_DAYS}
MIN_GROWTH_DAYS = 3  # whole days, each at least half observed, needed to fit a growth rate
MIN_DAY_COVERAGE = 0.5
CEIL_TOLERANCE = 1e-9  # 100 × 1.1 = 110.00000000000001 over 110 per replica is 1 replica, not 2

GrowthSource = Literal["given", "estimated", "none"]
PlanCapacitySource = Literal["measured", "rule_of_thumb"]


@dataclass(frozen=True)
class PlanInputs:
    """What the operator knows: measured capacity (``None`` → the rule of thumb), hardware shape, price, growth.

    ``growth_per_month`` 0.1 is +10 %/month (``None`` → estimated from the history); ``gpu_hour_cost`` 0 means
    no price given (cost fields are then ``None``); the plan covers peak × (1 + ``headroom``).
    """

    per_replica_capacity: float | None
    gpus_per_replica: int = 1
    gpus_per_node: int = 8
    gpu_hour_cost: float = 0.0
    growth_per_month: float | None = None
    headroom: float = 0.2

    def __post_init__(self) -> None:
        capacity = self.per_replica_capacity
        if capacity is not None and not (math.isfinite(capacity) and capacity > 0):
            raise ValueError(f"per_replica_capacity must be a finite number > 0 or None, got {capacity}")
        if self.gpus_per_replica < 1:
            raise ValueError(f"gpus_per_replica must be at least 1, got {self.gpus_per_replica}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be at least 1, got {self.gpus_per_node}")
        if not (math.isfinite(self.gpu_hour_cost) and self.gpu_hour_cost >= 0):
            raise ValueError(f"gpu_hour_cost must be a finite number >= 0, got {self.gpu_hour_cost}")
        growth = self.growth_per_month
        if growth is not None and not (math.isfinite(growth) and growth > -1):
            raise ValueError(f"growth_per_month must be a finite number > -1 or None, got {growth}")
        if not (math.isfinite(self.headroom) and self.headroom >= 0):
            raise ValueError(f"headroom must be a finite number >= 0, got {self.headroom}")


@dataclass(frozen=True)
class PlanHorizon:
    """What one horizon ("next_week" | "next_month") needs at its projected peak; ``cost`` is ``None`` unpriced."""

    name: str
    days: float
    peak_demand: float
    replicas: int
    gpus: int
    nodes: int
    cost: float | None


@dataclass(frozen=True)
class CapacityPlan:
    """Today's peak, the growth and capacity it was planned with (and where each came from), and the horizons."""

    current_peak: float
    growth_per_month: float
    growth_source: GrowthSource
    capacity_source: PlanCapacitySource
    per_replica_capacity: float
    horizons: tuple[PlanHorizon, ...]


def plan_capacity(demand: History, inputs: PlanInputs) -> CapacityPlan:
    """The plan for the next week and month from a demand history (requests/s per step, NaN = missing).

    Peak 1,000 QPS, no growth, no measured capacity, headroom 0 → 125 QPS per GPU → 8 replicas of 1 GPU → 1 node.
    Peak 100 req/s, +10 %/month, 40 req/s per replica of 2 GPUs, headroom 0.2, 2 $/GPU-hour → next month
    110 req/s × 1.2 / 40 = 3.3 → 4 replicas, 8 GPUs, 1 node, 8 × 2 × 720 h = 11,520 $.
    """
    observed = _observed_span(demand)
    steps_per_day = max(1, round(DAY_SECONDS / demand.step_seconds))
    current_peak = _peak(observed[-steps_per_day:])
    growth, growth_source = _growth(observed, steps_per_day, demand.step_seconds, inputs.growth_per_month)
    per_replica, capacity_source = _per_replica_capacity(inputs)
    horizons = tuple(
        _horizon(name, days, current_peak * (1 + growth) ** (days / MONTH_DAYS), per_replica, inputs)
        for name, days in HORIZON_DAYS.items()
    )
    return CapacityPlan(current_peak, growth, growth_source, capacity_source, per_replica, horizons)


def _observed_span(demand: History) -> FloatArray:
    """The history up to its last observed step: a trailing gap (an agent away) does not push the last day out."""
    values = np.asarray(demand.values, dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(values))
    if len(finite) == 0:
        raise ValueError("demand has no observed values")
    if np.any(values[finite] < 0):
        raise ValueError("demand must not be negative")
    return values[: finite[-1] + 1]


def _peak(values: FloatArray) -> float:
    """The 99th percentile of the observed values; callers pass a window with at least one."""
    return float(np.quantile(values[np.isfinite(values)], PEAK_QUANTILE))


def _growth(
    observed: FloatArray, steps_per_day: int, step_seconds: float, given: float | None
) -> tuple[float, GrowthSource]:
    """Monthly growth: given, or fitted to the whole days of the history (counted back from the last observation).

    The fit is least squares of log demand on time with one intercept per time of day, so the daily cycle is not
    read as growth and every observed step counts (one peak per day was 4× noisier: over 10 days at 2 % noise its
    estimate of +10 %/month scattered ±2.5 points, this one ±0.6). Demand growing 10 %/month rises
    ln(1.1) / 30 = 0.0032 per day in log → ``expm1(0.0032 × 30)`` = +10 %/month. Zero demand has no log and
    is left out like a gap; fewer than 3 days with half their steps observed → 0, "none".
    """
    if given is not None:
        return given, "given"
    days = len(observed) // steps_per_day
    grid = observed[len(observed) - days * steps_per_day :].reshape(days, steps_per_day)
    usable = np.isfinite(grid) & (grid > 0)
    if np.count_nonzero(usable.mean(axis=1) >= MIN_DAY_COVERAGE) < MIN_GROWTH_DAYS:
        return 0.0, "none"
    day_length = steps_per_day * step_seconds / DAY_SECONDS  # in days: 1 unless a step is longer than a day
    when = np.broadcast_to(np.arange(days, dtype=np.float64)[:, None] * day_length, grid.shape)
    log_demand = np.log(np.where(usable, grid, 1.0))
    # Remove each time of day's mean (over its observed days) from both; 3 days half observed share a time of day,
    # so the time spread below is never zero.
    when_spread = _centred_by_column(when, usable)
    slope_per_day = float((when_spread * _centred_by_column(log_demand, usable)).sum() / (when_spread**2).sum())
    return math.expm1(slope_per_day * MONTH_DAYS), "estimated"


def _centred_by_column(values: FloatArray, usable: npt.NDArray[np.bool_]) -> FloatArray:
    """Each usable value minus its column's mean over usable cells, 0 elsewhere: [[1], [3], [×]] → [[-1], [1], [0]]."""
    counts = np.maximum(usable.sum(axis=0), 1)
    means = np.where(usable, values, 0.0).sum(axis=0) / counts
    return np.where(usable, values - means, 0.0)


def _per_replica_capacity(inputs: PlanInputs) -> tuple[float, PlanCapacitySource]:
    """The measured capacity, else 1,000 QPS / 8 GPUs = 125 QPS per GPU × the replica's GPUs."""
    if inputs.per_replica_capacity is not None:
        return inputs.per_replica_capacity, "measured"
    return 1_000.0 / RULE_OF_THUMB_GPUS_PER_1000_QPS * inputs.gpus_per_replica, "rule_of_thumb"


def _horizon(name: str, days: float, peak: float, per_replica: float, inputs: PlanInputs) -> PlanHorizon:
    """Replicas for peak × (1 + headroom), at least one when there is any demand; whole nodes; cost when priced."""
    needed = peak * (1 + inputs.headroom) / per_replica
    replicas = max(1, math.ceil(needed - CEIL_TOLERANCE)) if peak > 0 else 0
    gpus = replicas * inputs.gpus_per_replica
    nodes = math.ceil(gpus / inputs.gpus_per_node)
    cost = gpus * inputs.gpu_hour_cost * days * 24 if inputs.gpu_hour_cost > 0 else None
    return PlanHorizon(name, days, peak, replicas, gpus, nodes, cost)
