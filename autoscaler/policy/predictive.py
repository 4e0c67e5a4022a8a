"""The ``predictive`` policy: enough replicas for the forecast's bound over the time a replica asked for now will
serve, from now + ``startup_seconds`` to that + ``margin_seconds``. The bound is the forecast's quantile at the pool's
attainment target — the forecaster's own where it gives quantiles (the prior, the smoothing family), so the headroom
is wide where the forecast is unsure and narrow where it is not — its excess over yhat scaled by a factor adapted
after every decision to the attainment actually reached (:mod:`autoscaler.policy.band_scale`, quantile tracking
toward ``attainment_target``); each replica is loaded to ``predictive_utilization`` of its capacity (1: the bound
carries the headroom). A scale-down within HPA's tolerance is not made (the forecast's noise
would otherwise flap the pool). Without a usable forecast the reactive policy decides, and the decision says why.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autoscaler.policy.decision import Decision, ForecastView, PoolContext, ScalingPolicy, hold
from autoscaler.policy.reactive import Reactive
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Policy
from predictor.distribution import UPPER_LEVEL


def forecast_peak(ctx: PoolContext) -> tuple[float, float, float] | None:
    """(bound, from, to): the forecast's largest bound (:meth:`ForecastView.bounds` at the attainment target, scaled
    by :attr:`PoolContext.provisioning_scale`; the band's 95 % point without a target) over [now + startup, now +
    startup + margin); with no point inside, the first point at or after its start, else the horizon's last point.
    None when there is no usable forecast.

    The window is half-open because a point at its end is the next decision's to cover: with 60-s forecast steps,
    decisions every 60 s and a 60-s margin, the decision at 12:00 covers the point at 12:00 + startup and the one at
    12:01 covers 12:01 + startup, each in time; counting both twice would provision every step for two steps' peak.
    """
    forecast = ctx.forecast
    if forecast is None or forecast.stale or forecast.distrusted or not forecast.points:
        return None
    start = ctx.now + ctx.startup_seconds
    end = start + ctx.settings.margin_seconds
    bounds = forecast.bounds(bound_level(ctx), ctx.provisioning_scale)
    window = [b for ts, b in bounds if start <= ts < end]
    if not window:
        after = [b for ts, b in bounds if ts >= start]
        window = after[:1] or [bounds[-1][1]]  # horizon ends before the window: its last point
    return max(window), start, end


def bound_level(ctx: PoolContext) -> float:
    """The quantile the bound is read at: the attainment target, or the band's 95 % point without one."""
    target = ctx.settings.attainment_target
    return UPPER_LEVEL if target is None else target


def per_replica_target(ctx: PoolContext) -> float | None:
    """The demand the predictive policy gives one replica: its capacity at ``predictive_utilization`` (100 req/s at
    0.9 → 90, at the default 1 → 100); None when no capacity is known. The KEDA scaler serves it as its per-replica
    target."""
    if ctx.per_replica_capacity is None:
        return None
    return ctx.settings.predictive_utilization * ctx.per_replica_capacity


def replicas_for(demand: float, per_replica: float) -> int:
    """Replicas that carry ``demand`` at ``per_replica`` each: ceil(200 / 90) = 3 (what KEDA's HPA computes too)."""
    return max(math.ceil(demand / per_replica - 1e-9), 0)


class Predictive:
    """Replicas for the forecast's adapted bound at now + startup (+ margin), each at ``predictive_utilization``."""

    name = Policy.PREDICTIVE

    def __init__(self, fallback: ScalingPolicy | None = None) -> None:
        self.fallback = fallback or Reactive()

    def decide(self, ctx: PoolContext) -> Decision:
        per_replica = per_replica_target(ctx)
        if per_replica is None:
            return hold(
                ctx,
                self.name,
                "predictive: no per-replica capacity measured or configured; holding",
                ReasonCode.NO_CAPACITY,
            )
        peak = forecast_peak(ctx)
        if peak is None:
            why = forecast_problem(ctx.forecast)
            fallback = self.fallback.decide(ctx)
            return replace(
                fallback,
                policy=self.name,
                reason=f"predictive off ({why}); {fallback.reason}",
                inputs={**fallback.inputs, "predictive": "off", "forecast_problem": why},
                code=_fallback_code(fallback.code, ctx.forecast),
            )
        upper, start, end = peak
        needed = replicas_for(upper, per_replica)
        wanted = _within_tolerance_down(ctx.current_replicas, needed, ctx.settings.tolerance)
        held = "" if wanted == needed else f"; within the {ctx.settings.tolerance:.0%} tolerance of {wanted}, holding"
        return Decision(
            wanted,
            self.name,
            f"predictive: forecast bound {upper:.4g} ({_bound_words(ctx)}) between +{start - ctx.now:.0f} s"
            f"{_startup_words(ctx)} and +{end - ctx.now:.0f} s needs {needed} replicas at "
            f"{ctx.settings.predictive_utilization:.2f} of {ctx.per_replica_capacity:.4g}{held}",
            {
                "forecast_replicas": needed,
                "forecast_upper": upper,
                "band_scale": round(ctx.provisioning_scale, 4),
                "startup_seconds": ctx.startup_seconds,
                "startup_measurements": ctx.startup_measurements,
                "demand": ctx.demand,
                "target_utilization": ctx.settings.predictive_utilization,
            },
            code=ReasonCode.FORECAST_PEAK if wanted == needed else ReasonCode.WITHIN_TOLERANCE,
            recommended=wanted,
        )


def _bound_words(ctx: PoolContext) -> str:
    """What the bound is, for the reason: "auto[prior]'s 99 % quantile, its excess over yhat × 1.12 toward 99.0 %
    attainment"."""
    target = ctx.settings.attainment_target
    model = f"{ctx.forecast.model}'s " if ctx.forecast is not None and ctx.forecast.model else "the forecast's "
    if target is None:
        return f"{model}95 % point, as it is"
    scale = ctx.provisioning_scale
    return f"{model}{target:.1%} quantile, its excess over yhat × {scale:.3g} toward {target:.1%} attainment"


def _startup_words(ctx: PoolContext) -> str:
    """Where the horizon's startup came from, when measured: " (the startup measured over 3 scale-ups)"."""
    n = ctx.startup_measurements
    return "" if n == 0 else f" (the startup measured over {n} scale-up{'s' if n > 1 else ''})"


def _fallback_code(code: ReasonCode, forecast: ForecastView | None) -> ReasonCode:
    """Predictive off: the fallback's count, under ForecastStale (ForecastInaccurate when its live accuracy turned
    it off), unless the fallback could not size at all (no capacity, no demand), which says more."""
    if code in (ReasonCode.REACTIVE_UTILIZATION, ReasonCode.WITHIN_TOLERANCE):
        distrusted = forecast is not None and not forecast.stale and forecast.distrusted is not None
        return ReasonCode.FORECAST_INACCURATE if distrusted else ReasonCode.FORECAST_STALE
    return code


def _within_tolerance_down(current: int, needed: int, tolerance: float) -> int:
    """HPA's dead band on the way down: a forecast asking for at most ``tolerance`` fewer replicas keeps the current
    count, so the forecast's step-to-step noise does not become scale events (20 current, 18 needed at 10 % → 20;
    17 needed → 17). Scale-ups are not damped: a short fleet misses the SLO, a 10 % fuller one costs little."""
    if needed < current and needed >= current * (1 - tolerance) - 1e-9:
        return current
    return needed


def forecast_problem(forecast: ForecastView | None) -> str:
    """Why there is no usable forecast, in words (the reason of a decision or event made without it)."""
    if forecast is None:
        return "no forecast"
    if forecast.stale:
        return f"forecast stale: {forecast.error or 'the last attempt failed'}"
    if forecast.distrusted:
        return f"forecast distrusted: {forecast.distrusted}"
    return "forecast has no points"
