"""What the KEDA external scaler serves for a pool, pure: the demand the pool must be ready for and what one replica
takes of it, so that KEDA's HPA, computing ceil(value / target), asks for the replicas the predictive policy would.

- value: the forecast's bound over [now + startup, + margin) (:func:`autoscaler.policy.predictive.forecast_peak`, the
  predictive policy's number at the band scale it starts from: the scaler keeps no state between KEDA's calls);
  with the forecast stale, failing or missing, the live demand the nodes report scaled to the reactive policy's
  headroom (demand × predictive / reactive utilization, so KEDA asks what reactive would), said so in ``source``
  and ``forecast_problem``; with neither, no value (a metric not measured is absent, not 0).
- target: the per-replica target of the predictive policy (:func:`autoscaler.policy.predictive.per_replica_target`).
- dry-run pools: the value that keeps the current replicas (current × target), the wanted one kept for the record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from autoscaler.policy.decision import PoolContext
from autoscaler.policy.predictive import forecast_peak, forecast_problem, per_replica_target, replicas_for


class Source(StrEnum):
    FORECAST = "forecast"  # the forecast's upper bound at now + startup
    LIVE = "live"  # no usable forecast: the demand the up nodes report now, at the reactive policy's headroom


class SignalUnavailable(Exception):
    """The pool has no value to serve; the message says what is missing."""


class NoCapacity(SignalUnavailable):
    """No per-replica capacity configured or learned: there is no per-replica target."""


class NoDemand(SignalUnavailable):
    """No usable forecast and no fresh demand sample."""


@dataclass(frozen=True)
class DemandSignal:
    value: float  # the demand to be ready for, in the pool's demand unit per second
    target: float  # the demand one replica is given
    source: Source
    forecast_problem: str | None = None  # why the forecast was not used (source LIVE)

    @property
    def replicas(self) -> int:
        """What KEDA's HPA makes of it: ceil(value / target) (270 against 90 → 3)."""
        return replicas_for(self.value, self.target)

    def holding(self, current_replicas: int) -> DemandSignal:
        """The value that keeps ``current_replicas`` (3 × 90 = 270 → 3): what a dry-run pool is served."""
        return DemandSignal(current_replicas * self.target, self.target, self.source, self.forecast_problem)


def pool_target(ctx: PoolContext, pool: str) -> float:
    target = per_replica_target(ctx)
    if target is None:
        raise NoCapacity(
            f"pool {pool}: no per-replica capacity configured (replica_capacity) or learned yet: "
            "there is no per-replica target to serve"
        )
    return target


def demand_signal(ctx: PoolContext, pool: str) -> DemandSignal:
    """The pool's signal at ``ctx.now``; NoCapacity or NoDemand when it has none."""
    target = pool_target(ctx, pool)
    peak = forecast_peak(ctx)
    if peak is not None:
        return DemandSignal(peak[0], target, Source.FORECAST)
    problem = forecast_problem(ctx.forecast)
    if not ctx.demand_is_fresh or ctx.demand is None:
        age = "none reported" if ctx.demand_age_seconds is None else f"the latest is {ctx.demand_age_seconds:.0f} s old"
        raise NoDemand(f"pool {pool}: {problem} and no fresh demand sample ({age})")
    headroom = ctx.settings.predictive_utilization / ctx.settings.target_utilization
    return DemandSignal(ctx.demand * headroom, target, Source.LIVE, problem)
