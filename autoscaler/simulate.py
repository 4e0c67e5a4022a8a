"""Replay a demand trace through a scaling policy (CONTRACT section 8): the same policy code as the live controller.

Model, step by step: replicas whose startup has elapsed become ready; the policy decides from the demand up to and
including this step (and, for predictive policies, a forecast fitted on that same history only); a scale-down takes
effect at once, removing replicas still starting first; replicas added now are ready ``startup_steps`` later (the
startup rounded up to whole steps). The fleet at step 0 is ready with the first decision's replicas. A step meets
the SLO when its demand is at most ready replicas × capacity; steps without a demand value are left out.

``oracle`` is not a policy a live fleet can run: it reads the trace's future and has exactly ceil(demand /
capacity) replicas ready at every step — the physical limit the other policies are measured against.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from autoscaler.policy.band_scale import adapted_band_scale
from autoscaler.policy.decision import Decision, ForecastView, PoolContext, ScalingPolicy
from autoscaler.policy.rails import (
    deciding_target,
    guarded,
    replicas_within_target,
    rules_per_interval,
    scale_down_window_seconds,
)
from autoscaler.policy.registry import FORECAST_POLICIES, POLICIES, make_policy
from autoscaler.policy.settings import PolicySettings
from fleet.pools import Policy
from predictor.base import FloatArray, Forecast, ForecastError, History
from predictor.series_csv import value_text

ORACLE = "oracle"
SIMULATED_POLICIES: tuple[str, ...] = (*(p.value for p in POLICIES), ORACLE)
EPSILON = 1e-9

ForecastFn = Callable[[History, int], Forecast]


@dataclass(frozen=True)
class SimulationSettings:
    capacity_per_replica: float
    startup_seconds: float
    min_replicas: int = 1
    max_replicas: int = 10_000
    policy: PolicySettings = field(default_factory=PolicySettings)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.capacity_per_replica) and self.capacity_per_replica > 0):
            raise ValueError(f"capacity_per_replica: must be a positive number, got {self.capacity_per_replica}")
        if not (math.isfinite(self.startup_seconds) and self.startup_seconds >= 0):
            raise ValueError(f"startup_seconds: must be >= 0, got {self.startup_seconds}")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"min_replicas/max_replicas: need 0 <= min <= max, got {self.min_replicas}, {self.max_replicas}"
            )


@dataclass(frozen=True)
class Step:
    ts: float
    demand: float  # NaN when the trace has no value
    desired: int
    ready: int
    reason: str


@dataclass(frozen=True)
class SimulationResult:
    policy: str
    step_seconds: float
    steps: tuple[Step, ...]

    @property
    def replica_hours(self) -> float:
        return sum(max(s.desired, s.ready) for s in self.steps) * self.step_seconds / 3600.0

    def slo_attainment(self, capacity_per_replica: float) -> float | None:
        scored = [s for s in self.steps if math.isfinite(s.demand)]
        if not scored:
            return None
        met = sum(1 for s in scored if s.demand <= s.ready * capacity_per_replica + EPSILON)
        return met / len(scored)

    @property
    def scale_events(self) -> int:
        return sum(1 for a, b in zip(self.steps, self.steps[1:], strict=False) if a.desired != b.desired)


def startup_steps(startup_seconds: float, step_seconds: float) -> int:
    """The startup in whole steps, rounding up: 3 min at 1-min steps is 3, 15 min at 10-min steps is 2."""
    return math.ceil(startup_seconds / step_seconds - EPSILON)


def needed(demand: float, capacity: float) -> int:
    return max(math.ceil(demand / capacity - EPSILON), 0)


class _Fleet:
    """Ready replicas and replicas starting (each with the step it becomes ready)."""

    def __init__(self, ready: int) -> None:
        self.ready = ready
        self.starting: list[int] = []  # ready-at step of each starting replica, oldest first

    @property
    def total(self) -> int:
        return self.ready + len(self.starting)

    def advance(self, step: int) -> None:
        arrived = [t for t in self.starting if t <= step]
        self.ready += len(arrived)
        self.starting = [t for t in self.starting if t > step]

    def resize(self, desired: int, step: int, delay: int) -> None:
        if desired > self.total:
            self.starting.extend([step + delay] * (desired - self.total))
            self.advance(step)  # a zero-step startup is ready at once
            return
        surplus = self.total - desired
        cancelled = min(surplus, len(self.starting))
        self.starting = self.starting[: len(self.starting) - cancelled]  # the newest starting ones go first
        self.ready -= surplus - cancelled


def simulate(
    history: History,
    policy_name: str,
    settings: SimulationSettings,
    *,
    forecast: ForecastFn | None = None,
) -> SimulationResult:
    """Run ``policy_name`` over the trace; ``forecast(history_up_to_t, horizon_steps)`` feeds predictive policies."""
    if policy_name not in SIMULATED_POLICIES:
        raise ValueError(f"unknown policy {policy_name!r}; known: {', '.join(SIMULATED_POLICIES)}")
    step_s = history.step_seconds
    delay = startup_steps(settings.startup_seconds, step_s)
    values = history.values
    if policy_name == ORACLE:
        return _oracle(history, settings)
    policy = make_policy(policy_name)
    policy_settings = _policy_settings(history, policy_name, settings)
    window_s = scale_down_window_seconds(policy_settings, settings.startup_seconds)
    wants_forecast = policy_name in FORECAST_POLICIES
    horizon = max(1, math.ceil((settings.startup_seconds + policy_settings.margin_seconds) / step_s - EPSILON) + 1)
    fleet: _Fleet | None = None
    recent: list[tuple[int, float]] = []
    last_seen: tuple[float, float] | None = None  # (ts, value) of the last observed demand
    band_scale: float | None = None  # the predictive bound's band scale, adapted after every scored step
    steps: list[Step] = []
    for t, ts in _timestamps(history):
        if math.isfinite(values[t]):
            last_seen = (ts, float(values[t]))
        if fleet is not None:
            fleet.advance(t)  # replicas whose startup has elapsed are ready before the decision
        ready = fleet.ready if fleet is not None else 0
        starting = len(fleet.starting) if fleet is not None else 0
        ctx = PoolContext(
            now=ts,
            min_replicas=settings.min_replicas,
            max_replicas=settings.max_replicas,
            ready_replicas=ready,
            starting_replicas=starting,
            per_replica_capacity=settings.capacity_per_replica,
            demand=None if last_seen is None else last_seen[1],
            demand_age_seconds=None if last_seen is None else ts - last_seen[0],
            startup_seconds=settings.startup_seconds,
            forecast=_forecast_view(history, t, horizon, forecast) if wants_forecast and forecast else None,
            recent_recommendations=tuple((r, ts - at) for r, at in recent),
            settings=policy_settings,
            band_scale=band_scale,
        )
        decision = _decide(policy, ctx, first=fleet is None)
        if fleet is None:
            fleet = _Fleet(decision.replicas)
        else:
            fleet.resize(decision.replicas, t, delay)
        recent = [(r, at) for r, at in recent if ts - at <= window_s]
        recent.append((decision.recommended, ts))
        steps.append(Step(ts, float(values[t]), decision.replicas, fleet.ready, decision.reason))
        if wants_forecast and math.isfinite(values[t]):
            missed = values[t] > fleet.ready * settings.capacity_per_replica + EPSILON
            band_scale = adapted_band_scale(ctx.provisioning_scale, missed, policy_settings, step_s)
    return SimulationResult(policy_name, step_s, tuple(steps))


def _policy_settings(history: History, policy_name: str, settings: SimulationSettings) -> PolicySettings:
    """The policy's settings for this trace: the step limits restated for one decision per step and, for static
    without a count of its own, the count the trace's peak needs."""
    policy_settings = settings.policy
    if policy_name == Policy.STATIC and policy_settings.static_replicas is None:  # static-peak: hindsight's peak
        values = history.values
        peak = float(np.nanmax(values)) if np.any(np.isfinite(values)) else 0.0
        policy_settings = replace(policy_settings, static_replicas=needed(peak, settings.capacity_per_replica))
    return replace(
        policy_settings,
        scale_up_rules=rules_per_interval(policy_settings.scale_up_rules, history.step_seconds),
        scale_down_rules=rules_per_interval(policy_settings.scale_down_rules, history.step_seconds),
    )


def _decide(policy: ScalingPolicy, ctx: PoolContext, *, first: bool) -> Decision:
    """The first decision sizes a fleet that does not exist yet and serves step 0 at once: the policy's own answer,
    but at least what keeps step 0's demand within the policy's target (a predictive answer sized for a quieter
    next step would otherwise miss step 0), clamped to min/max."""
    if not first:
        return guarded(policy, ctx)
    decision = policy.decide(replace(ctx, ready_replicas=max(ctx.ready_replicas, 1)))
    wanted, reason = decision.replicas, decision.reason
    if policy.name != Policy.STATIC:
        present = replicas_within_target(ctx, deciding_target(decision, ctx.settings))
        if present > wanted:
            wanted, reason = present, f"{reason}; the first fleet serves this step's demand too → {present}"
    replicas = min(max(wanted, ctx.min_replicas), ctx.max_replicas)
    # What the fleet was sized to is this decision's recommendation for the stabilization window that follows.
    return replace(decision, replicas=replicas, reason=reason, recommended=replicas)


def _timestamps(history: History) -> Iterator[tuple[int, float]]:
    for t in range(len(history)):
        yield t, history.start_ts + t * history.step_seconds


def _forecast_view(history: History, t: int, horizon: int, forecast: ForecastFn) -> ForecastView | None:
    """The forecast from the rows up to and including ``t`` only; a failure is a stale view that says why."""
    origin = history.start_ts + t * history.step_seconds
    try:
        fc = forecast(history.upto(t + 1), horizon)
    except ForecastError as exc:
        return ForecastView(origin, (), stale=True, error=str(exc))
    step = history.step_seconds
    stamps = (origin + step * np.arange(1, fc.horizon + 1)).tolist()
    points = tuple(zip(stamps, fc.yhat.tolist(), fc.lo.tolist(), fc.hi.tolist(), strict=True))
    quantiles = () if fc.quantiles is None else tuple(map(tuple, fc.quantiles.tolist()))
    return ForecastView(origin, points, levels=fc.levels, quantiles=quantiles)


def _oracle(history: History, settings: SimulationSettings) -> SimulationResult:
    values: FloatArray = history.values
    steps = []
    for t, ts in _timestamps(history):
        demand = float(values[t])
        exact = needed(demand, settings.capacity_per_replica) if math.isfinite(demand) else 0
        replicas = min(max(exact, settings.min_replicas), settings.max_replicas)
        steps.append(Step(ts, demand, replicas, replicas, "oracle: exactly enough for this step's demand"))
    return SimulationResult(ORACLE, history.step_seconds, tuple(steps))


def summary(result: SimulationResult, capacity_per_replica: float) -> dict[str, float | int | str | None]:
    """The summary.json object of CONTRACT section 8 (replica_hours, slo_attainment, scale_events)."""
    return {
        "policy": result.policy,
        "replica_hours": round(result.replica_hours, 6),
        "slo_attainment": result.slo_attainment(capacity_per_replica),
        "scale_events": result.scale_events,
    }


def write_outputs(
    result: SimulationResult, capacity_per_replica: float, out: Path, labels: Sequence[str] | None = None
) -> dict[str, float | int | str | None]:
    """``decisions.csv`` (timestamp as in the input when ``labels`` are given, demand exactly as read) and
    ``summary.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "decisions.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp", "demand", "desired_replicas", "ready_replicas"])
        for i, step in enumerate(result.steps):
            stamp = labels[i] if labels is not None else f"{step.ts:g}"
            writer.writerow([stamp, value_text(step.demand), step.desired, step.ready])
    body = summary(result, capacity_per_replica)
    (out / "summary.json").write_text(json.dumps(body, indent=2) + "\n")
    return body
