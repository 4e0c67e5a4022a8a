"""The safety rails around every policy but ``static`` (:func:`guarded`): min/max and step limits (HPA's per-period
policies, restated for the decision interval: :func:`rules_per_interval`), scale-down only once the stabilization
window agrees (HPA's, stretched to the startup time when that is longer: :func:`scale_down_window_seconds`) and only
while the load per surviving replica stays within target (the N/(N−1) check), no scale-down on stale or missing
metrics, no further scale-up while replicas are still starting unless the need has grown past them, and the
predictive part switched off — and said so — when the forecast is stale, failing or missing, or distrusted for its
live accuracy (``ForecastInaccurate``, in :mod:`autoscaler.policy.predictive`). A rail that changes the policy's
count gives the decision its code (StepLimit, ScaleDownStabilized, ...); the prose keeps the policy's reason and says
what the rail did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from autoscaler.hpa import ScalingRule, rate_limited, stabilized
from autoscaler.policy.decision import Decision, PoolContext, ScalingPolicy
from autoscaler.policy.settings import PolicySettings
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Policy


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


def guarded(policy: ScalingPolicy, ctx: PoolContext) -> Decision:
    """The policy's decision through the safety rails; the reason says which rail changed it, if any, and the code
    is the rail's when one bound the count (the last to bind wins: a scale-down the window allowed and the step
    limit then slowed is a StepLimit)."""
    decision = policy.decide(ctx)
    if policy.name == Policy.STATIC:
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
