"""Scaling policies, pure: one frozen :class:`PoolContext` in, one :class:`Decision` with its reason out: the
reason in words and its :class:`~autoscaler.scaling_events.ReasonCode`, the code of the rule that decided the replicas.

The live controller and ``fleetpilot simulate`` build the same context (from storage, or from a trace) and call the
same policies, so what the simulator measures is what the fleet runs.

- ``static``: a fixed count (``min_replicas`` unless told otherwise).
- ``reactive``: the Kubernetes HPA on utilization of per-replica capacity (:mod:`autoscaler.hpa`): demand over ready
  replicas × capacity against ``target_utilization``, with HPA's tolerance.
- ``predictive``: enough replicas for the forecast's bound over the time a replica asked for now will serve: from
  now + ``startup_seconds`` to that + ``margin_seconds``. The bound is yhat plus a scale times the band's upper
  half-width, the scale adapted after every decision to the attainment actually reached (:func:`adapted_band_scale`,
  quantile tracking toward ``attainment_target``), so the headroom is what the pool's SLO needs on this demand, not
  a fixed utilization; each replica is loaded to ``predictive_utilization`` of its capacity (1: the bound carries
  the headroom). A scale-down within HPA's tolerance is not made (the forecast's noise would otherwise flap the
  pool).
- ``hybrid``: the larger of the two while reactive scales up (a forecast that under-shoots cannot starve the pool of
  what the queue shows it needs now); otherwise a usable forecast asking for fewer may lead the scale-down, never
  below what today's demand needs at the predictive utilization.

Safety rails around every policy but ``static`` (:func:`guarded`): min/max and step limits (HPA's per-period
policies), scale-down only once the stabilization window agrees (HPA's, stretched to the startup time when that is
longer: :func:`scale_down_window_seconds`) and only while the load per surviving replica stays within target (the
N/(N−1) check), no scale-down on stale or missing metrics, no further scale-up while replicas are still starting
unless the need has grown past them, and the predictive part switched off — and said so — when the forecast is
stale, failing or missing, or distrusted for its live accuracy (``ForecastInaccurate``). A rail that changes the
policy's count gives the decision its code (StepLimit, ScaleDownStabilized, ...); the prose keeps the policy's
reason and says what the rail did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Protocol

from autoscaler.hpa import (
    KUBERNETES_SCALE_DOWN_POLICIES,
    KUBERNETES_SCALE_DOWN_WINDOW_S,
    KUBERNETES_SCALE_UP_POLICIES,
    ScalingRule,
    external_desired_replicas,
    rate_limited,
    stabilized,
)
from autoscaler.scaling_events import ReasonCode
from predictor.base import INTERVAL_COVERAGE

InputValue = float | int | str | bool | None


@dataclass(frozen=True)
class PolicySettings:
    """The knobs of every policy; the defaults are what a pool gets unless its operator says otherwise."""

    target_utilization: float = 0.7  # reactive: HPA target, demand per ready replica over its capacity
    predictive_utilization: float = 1.0  # predictive: how full the forecast's bound may make each replica
    margin_seconds: float = 60.0  # predictive: cover [startup, startup + margin) ahead (one decision interval or more)
    tolerance: float = 0.1
    stabilization_window_seconds: float = KUBERNETES_SCALE_DOWN_WINDOW_S
    stale_after_seconds: float = 30.0  # demand older than this is stale: no scale-down on it
    scale_up_rules: tuple[ScalingRule, ...] = KUBERNETES_SCALE_UP_POLICIES  # HPA's defaults
    scale_down_rules: tuple[ScalingRule, ...] = KUBERNETES_SCALE_DOWN_POLICIES
    static_replicas: int | None = None  # static: this count (default min_replicas)
    # predictive: the share of time the ready replicas should carry the demand; the forecast's bound is scaled toward
    # it (:func:`adapted_band_scale`). None: the forecast's 95 % upper bound, fixed.
    attainment_target: float | None = 0.999
    quantile_rate: float = 0.02  # how fast the band scale follows misses and hits (quantile tracking's eta), per minute

    def __post_init__(self) -> None:
        for name in ("target_utilization", "predictive_utilization"):
            value = getattr(self, name)
            if not (0 < value <= 1.5):
                raise ValueError(f"{name}: must be in (0, 1.5], got {value}")
        if self.attainment_target is not None and not (0.5 <= self.attainment_target < 1):
            raise ValueError(f"attainment_target: must be in [0.5, 1), got {self.attainment_target}")
        if not (0 <= self.quantile_rate <= 10):
            raise ValueError(f"quantile_rate: must be in [0, 10], got {self.quantile_rate}")
        if self.margin_seconds < 0 or self.stabilization_window_seconds < 0 or self.stale_after_seconds <= 0:
            raise ValueError("margin_seconds and stabilization_window_seconds must be >= 0, stale_after_seconds > 0")


@dataclass(frozen=True)
class ForecastView:
    """The pool's latest demand forecast: points (ts, yhat, lo, hi) after ``origin_ts``; ``stale`` if it failed."""

    origin_ts: float
    points: tuple[tuple[float, float, float, float], ...]
    stale: bool = False
    error: str | None = None
    distrusted: str | None = None  # why its live accuracy says not to follow it (predictor.accuracy); None: trusted


@dataclass(frozen=True)
class PoolContext:
    """Everything a decision may use, at ``now``; demand and capacity in the pool's demand unit per second."""

    now: float
    min_replicas: int
    max_replicas: int
    ready_replicas: int
    starting_replicas: int
    per_replica_capacity: float | None  # None: not measured or configured (only static can act)
    demand: float | None  # the latest demand; None: no fresh sample
    demand_age_seconds: float | None
    startup_seconds: float
    forecast: ForecastView | None = None
    startup_measurements: int = 0  # the scale-ups ``startup_seconds`` was measured over; 0: as configured
    recent_recommendations: tuple[tuple[int, float], ...] = ()  # (replicas, age_s) of earlier decisions
    settings: PolicySettings = field(default_factory=PolicySettings)
    band_scale: float | None = None  # what :func:`adapted_band_scale` reached; None: where it starts

    @property
    def provisioning_scale(self) -> float:
        """How many of the forecast band's upper half-widths above yhat the predictive policy provisions for."""
        return self.band_scale if self.band_scale is not None else initial_band_scale(self.settings)

    @property
    def current_replicas(self) -> int:
        """Replicas asked for and not yet gone: ready plus still starting."""
        return self.ready_replicas + self.starting_replicas

    @property
    def demand_is_fresh(self) -> bool:
        age = self.demand_age_seconds
        return self.demand is not None and age is not None and age <= self.settings.stale_after_seconds


@dataclass(frozen=True)
class Decision:
    """The replicas the pool should have, which policy said so, why (in words and as a code), and the inputs that
    mattered."""

    replicas: int
    policy: str
    reason: str
    inputs: Mapping[str, InputValue] = field(default_factory=dict)
    code: ReasonCode = field(kw_only=True)

    @property
    def recommendation(self) -> int:
        """What the policy wanted before the safety rails (for the stabilization window); defaults to replicas."""
        value = self.inputs.get("recommended")
        return value if isinstance(value, int) else self.replicas


class ScalingPolicy(Protocol):
    """What decides a pool's replicas (static, reactive, predictive, hybrid); the pool's ``policy`` names one."""

    name: str

    def decide(self, ctx: PoolContext) -> Decision: ...


def _hold(ctx: PoolContext, policy: str, reason: str, code: ReasonCode, **inputs: InputValue) -> Decision:
    return Decision(ctx.current_replicas, policy, reason, {"recommended": ctx.current_replicas, **inputs}, code=code)


class Static:
    name = "static"

    def decide(self, ctx: PoolContext) -> Decision:
        wanted = ctx.settings.static_replicas if ctx.settings.static_replicas is not None else ctx.min_replicas
        replicas = min(max(wanted, ctx.min_replicas), ctx.max_replicas)
        return Decision(
            replicas, self.name, f"static: {replicas} replicas", {"recommended": replicas}, code=ReasonCode.STATIC_COUNT
        )


class Reactive:
    """HPA on utilization of per-replica capacity: ceil(demand / (target × capacity)) outside the tolerance."""

    name = "reactive"

    def decide(self, ctx: PoolContext) -> Decision:
        s = ctx.settings
        if ctx.per_replica_capacity is None:
            return _hold(
                ctx,
                self.name,
                "reactive: no per-replica capacity measured or configured; holding",
                ReasonCode.NO_CAPACITY,
            )
        if ctx.demand is None:
            return _hold(ctx, self.name, "reactive: no demand sample; holding", ReasonCode.STALE_METRICS)
        target = s.target_utilization * ctx.per_replica_capacity
        # As HPA's per-pod external metric: the demand spread over every replica asked for (ready or starting).
        base = max(ctx.current_replicas, 1)
        wanted = external_desired_replicas(
            base, ctx.ready_replicas, ctx.demand, target, per_replica=True, tolerance=s.tolerance
        )
        utilization = ctx.demand / (base * ctx.per_replica_capacity)
        return Decision(
            wanted,
            self.name,
            f"reactive: utilization {utilization:.2f} of {base} replicas against target "
            f"{s.target_utilization:.2f} → {wanted}",
            {
                "recommended": wanted,
                "demand": ctx.demand,
                "utilization": round(utilization, 4),
                "target_utilization": s.target_utilization,
            },
            code=ReasonCode.WITHIN_TOLERANCE if wanted == ctx.current_replicas else ReasonCode.REACTIVE_UTILIZATION,
        )


UPPER_LEVEL = 0.5 + INTERVAL_COVERAGE / 2  # the forecast band's hi is its 0.95 quantile
_UPPER_Z = NormalDist().inv_cdf(UPPER_LEVEL)
MIN_BAND_SCALE = 1e-3  # a scale that has shrunk to nothing can still grow again


def initial_band_scale(settings: PolicySettings) -> float:
    """Where the band scale starts: the target's normal quantile over the band's (0.999 → 3.090 / 1.645 = 1.879);
    1 (the band's own upper bound) without a target."""
    target = settings.attainment_target
    return 1.0 if target is None else NormalDist().inv_cdf(target) / _UPPER_Z


def adapted_band_scale(scale: float, missed: bool, settings: PolicySettings, elapsed_seconds: float) -> float:
    """The band scale after one decision interval, by quantile tracking on its logarithm (Angelopoulos, Candès and
    Tibshirani, "Conformal PID control", 2023; adaptive conformal inference on the bound itself rather than on its
    level): × exp(η (1 − α)) when the demand outran the ready replicas' capacity, × exp(−η α) otherwise, α = 1 −
    ``attainment_target``, η = ``quantile_rate`` per minute of the interval. Misses then come at rate α in the long
    run whatever the forecast's calibration, utilization or lag: each miss takes what 1/α − 1 hits give back; on the
    logarithm, a band ten times too narrow is made good in about a hundred misses, whatever its width. Target 0.999,
    η 0.02, one minute: a miss widens the bound's excess over yhat by 2.0 %, a hit narrows it by 0.002 %."""
    target = settings.attainment_target
    if target is None:
        return scale
    eta = settings.quantile_rate * elapsed_seconds / 60.0
    alpha = 1 - target
    return max(scale, MIN_BAND_SCALE) * math.exp(eta * ((1.0 if missed else 0.0) - alpha))


def forecast_peak(ctx: PoolContext) -> tuple[float, float, float] | None:
    """(bound, from, to): the forecast's largest bound, yhat + the band scale × (hi − yhat) (:attr:`PoolContext.
    provisioning_scale`), over [now + startup, now + startup + margin); with no
    point inside, the first point at or after its start, else the horizon's last point. None when there is no usable
    forecast.

    The window is half-open because a point at its end is the next decision's to cover: with 60-s forecast steps,
    decisions every 60 s and a 60-s margin, the decision at 12:00 covers the point at 12:00 + startup and the one at
    12:01 covers 12:01 + startup, each in time; counting both twice would provision every step for two steps' peak.
    """
    forecast = ctx.forecast
    if forecast is None or forecast.stale or forecast.distrusted or not forecast.points:
        return None
    start = ctx.now + ctx.startup_seconds
    end = start + ctx.settings.margin_seconds
    scale = ctx.provisioning_scale
    window = [p for p in forecast.points if start <= p[0] < end]
    if not window:
        after = [p for p in forecast.points if p[0] >= start]
        window = after[:1] or [forecast.points[-1]]  # horizon ends before the window: its last point
    return max(yhat + scale * (hi - yhat) for _ts, yhat, _lo, hi in window), start, end


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

    name = "predictive"

    def __init__(self, fallback: ScalingPolicy | None = None) -> None:
        self.fallback = fallback or Reactive()

    def decide(self, ctx: PoolContext) -> Decision:
        per_replica = per_replica_target(ctx)
        if per_replica is None:
            return _hold(
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
                "recommended": wanted,
                "forecast_replicas": needed,
                "forecast_upper": upper,
                "band_scale": round(ctx.provisioning_scale, 4),
                "startup_seconds": ctx.startup_seconds,
                "startup_measurements": ctx.startup_measurements,
                "demand": ctx.demand,
                "target_utilization": ctx.settings.predictive_utilization,
            },
            code=ReasonCode.FORECAST_PEAK if wanted == needed else ReasonCode.WITHIN_TOLERANCE,
        )


def _bound_words(ctx: PoolContext) -> str:
    """What the bound is, for the reason: "yhat + 1.57 × the band, toward 99.5 % attainment"."""
    target = ctx.settings.attainment_target
    toward = "the band's own upper bound" if target is None else f"toward {target:.1%} attainment"
    return f"yhat + {ctx.provisioning_scale:.3g} × the band, {toward}"


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


class Hybrid:
    """The larger of reactive and predictive while reactive scales up; a forecast below reactive leads a scale-down
    (:func:`_forecast_may_lead_down`)."""

    name = "hybrid"

    def __init__(self) -> None:
        self.reactive = Reactive()
        self.predictive = Predictive(fallback=self.reactive)

    def decide(self, ctx: PoolContext) -> Decision:
        reactive = self.reactive.decide(ctx)
        predictive = self.predictive.decide(ctx)
        chosen = predictive if predictive.replicas > reactive.replicas else reactive
        leads = _forecast_may_lead_down(ctx, reactive, predictive)
        if leads is not None:
            chosen = leads
        # with the forecast off both say the same count: say why the forecast had no part (ForecastStale)
        code = predictive.code if predictive.inputs.get("predictive") == "off" else chosen.code
        inputs = {
            **predictive.inputs,
            **reactive.inputs,
            "recommended": chosen.replicas,
        }  # reactive's target: the floor
        inputs["reactive_replicas"] = reactive.replicas
        inputs["predictive_replicas"] = predictive.replicas
        return Decision(
            chosen.replicas,
            self.name,
            f"hybrid: {'the forecast leads the scale-down' if leads is not None else 'max'} of [{reactive.reason}] and "
            f"[{predictive.reason}]",
            inputs,
            code=code,
        )


def _forecast_may_lead_down(ctx: PoolContext, reactive: Decision, predictive: Decision) -> Decision | None:
    """The predictive decision when a usable forecast asks for fewer replicas than reactive while reactive is not
    scaling up: reactive stays the floor on the way up only. Never below what today's demand needs at the
    predictive utilization (the forecast may lead a scale-down, not starve the pool now). None: reactive's floor holds.

    Worked: 20 current, reactive holds 20 (demand 126 at 70 % of 10), the forecast's upper bound 150 at 90 % → 17,
    demand today needs ceil(126 / 9) = 14 → 17.
    """
    if predictive.inputs.get("predictive") == "off" or reactive.replicas > ctx.current_replicas:
        return None
    if predictive.replicas >= reactive.replicas or ctx.demand is None:
        return None
    per_replica = per_replica_target(ctx)
    if per_replica is None:
        return None
    floor = replicas_for(ctx.demand, per_replica)
    return predictive if predictive.replicas >= floor else replace(predictive, replicas=floor)


def forecast_problem(forecast: ForecastView | None) -> str:
    """Why there is no usable forecast, in words (the reason of a decision or event made without it)."""
    if forecast is None:
        return "no forecast"
    if forecast.stale:
        return f"forecast stale: {forecast.error or 'the last attempt failed'}"
    if forecast.distrusted:
        return f"forecast distrusted: {forecast.distrusted}"
    return "forecast has no points"


POLICIES: dict[str, type[Static] | type[Reactive] | type[Predictive] | type[Hybrid]] = {
    "static": Static,
    "reactive": Reactive,
    "predictive": Predictive,
    "hybrid": Hybrid,
}


def rules_per_interval(rules: tuple[ScalingRule, ...], interval_s: float) -> tuple[ScalingRule, ...]:
    """Step limits restated for one decision every ``interval_s``: rate_limited applies a rule once per call, so a
    rule of period P becomes interval/P periods' worth. ("Pods", 4, 15) every 60 s → ("Pods", 16, 60); every 5 s →
    ("Pods", 2, 5) (4 × 5/15, rounded up); ("Percent", 100, 15) every 60 s → ("Percent", 1500, 60) (2⁴ − 1)."""
    scaled: list[ScalingRule] = []
    for kind, value, period in rules:
        periods = interval_s / period
        if kind == "Pods":
            scaled.append((kind, float(max(1, math.ceil(value * periods - 1e-9))), interval_s))
        else:
            scaled.append((kind, ((1 + value / 100) ** periods - 1) * 100, interval_s))
    return tuple(scaled)


def make_policy(name: str) -> ScalingPolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[name]()


def guarded(policy: ScalingPolicy, ctx: PoolContext) -> Decision:
    """The policy's decision through the safety rails; the reason says which rail changed it, if any, and the code
    is the rail's when one bound the count (the last to bind wins: a scale-down the window allowed and the step
    limit then slowed is a StepLimit)."""
    decision = policy.decide(ctx)
    if policy.name == "static":
        return decision
    current, s = ctx.current_replicas, ctx.settings
    wanted, notes, code = decision.replicas, [], decision.code
    if ctx.starting_replicas > 0 and ctx.ready_replicas < wanted < current:
        # More than is ready, less than is on its way: cancelling replicas that are nearly there would only
        # have to be undone; a scale-up happens only when the need grows past ready + starting.
        wanted, code = current, ReasonCode.REPLICAS_STARTING
        notes.append("replicas still starting cover the need")
    elif wanted < current:
        railed, note, rail = _scale_down_rails(ctx, wanted, deciding_target(decision, s))
        if rail is not None and railed != wanted:
            code = rail
        wanted = railed
        if note:
            notes.append(note)
    limited, limit_reason = rate_limited(
        current,
        wanted,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
        scale_up_policies=s.scale_up_rules,
        scale_down_policies=s.scale_down_rules,
    )
    if limit_reason != "DesiredWithinRange":
        notes.append(limit_reason)
        code = LIMIT_CODES[limit_reason]
    reason = decision.reason if not notes else f"{decision.reason}; {', '.join(notes)} → {limited}"
    inputs = {**decision.inputs, "limit": limit_reason}
    return replace(decision, replicas=limited, reason=reason, inputs=inputs, code=code)


# rate_limited's Kubernetes condition reasons, as codes (DesiredWithinRange binds nothing: no code of its own)
LIMIT_CODES: Mapping[str, ReasonCode] = {
    "ScaleUpLimit": ReasonCode.STEP_LIMIT,
    "ScaleDownLimit": ReasonCode.STEP_LIMIT,
    "TooManyReplicas": ReasonCode.MAX_REPLICAS,
    "TooFewReplicas": ReasonCode.MIN_REPLICAS,
}


def scale_down_window_seconds(settings: PolicySettings, startup_seconds: float) -> float:
    """How far back a scale-down looks at earlier recommendations: HPA's window, but at least the startup. A replica
    given back is only worth it if the lower need has lasted as long as a new one takes to start: with a 600-s
    startup and one decision every 600 s, HPA's 300 s window holds no earlier decision and each dip would remove
    replicas the next decision asks back, ready only 600 s later."""
    return max(settings.stabilization_window_seconds, startup_seconds)


def _scale_down_rails(ctx: PoolContext, wanted: int, target: float) -> tuple[int, str | None, ReasonCode | None]:
    """Scale down only on fresh metrics, once the stabilization window agrees, and never below what keeps the load
    per surviving replica within the deciding policy's target (:func:`replicas_within_target`). The count, the note
    and the code of the rail that changed it (None when none did)."""
    current, s = ctx.current_replicas, ctx.settings
    if not ctx.demand_is_fresh:
        return current, "no scale-down on stale or missing metrics", ReasonCode.STALE_METRICS
    window = scale_down_window_seconds(s, ctx.startup_seconds)
    stable = stabilized(wanted, ctx.recent_recommendations, window)
    if stable >= current:
        return current, f"stabilization window ({window:.0f} s) holds {current}", ReasonCode.SCALE_DOWN_STABILIZED
    floor = replicas_within_target(ctx, target)
    if stable < floor:
        kept = min(floor, current)
        return kept, f"load per surviving replica must stay within target: at least {kept}", ReasonCode.SCALE_DOWN_FLOOR
    if stable == wanted:
        return stable, None, None
    return stable, f"stabilization window keeps {stable}", ReasonCode.SCALE_DOWN_STABILIZED


def deciding_target(decision: Decision, settings: PolicySettings) -> float:
    """The utilization the deciding policy aimed at: predictive's for a forecast-made decision, else reactive's."""
    target = decision.inputs.get("target_utilization")
    return target if isinstance(target, float) else settings.target_utilization


def replicas_within_target(ctx: PoolContext, target: float) -> int:
    """The replicas that keep the present demand within ``target`` of their capacity (0 without demand or capacity):
    demand 100, capacity 10, target 0.7 → ceil(100 / 7) = 15."""
    if ctx.per_replica_capacity is None or ctx.demand is None:
        return 0
    return max(math.ceil(ctx.demand / (target * ctx.per_replica_capacity) - 1e-9), 0)
