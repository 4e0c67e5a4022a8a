"""The Kubernetes horizontal pod autoscaler's (autoscaling/v2) replica calculation, as pure functions.

A port of ``pkg/controller/podautoscaler/replica_calculator.go`` and the behaviour half of ``horizontal.go``; the
names of Kubernetes' functions are given where each step comes from. Numbers in, numbers out: no clock, no state.

**Per-replica metric** (``desired_replicas``, Kubernetes ``GetResourceReplicas`` / ``calcPlainMetricReplicas``).
Failed replicas are dropped. Pending replicas, and unready ones when ``readiness_matters`` (Kubernetes does so for
CPU only), are set aside; replicas without a sample are *missing*. The usage ratio is the mean of the ready samples
over the target. Nothing set aside or missing: inside the tolerance band nothing changes, else
ceil(ratio × ready), e.g. samples 30, 50, 70 % against 30 %: ratio 1.67 → ceil(1.67 × 3) = 5 replicas.
Otherwise the sums are redone with fill-ins: on a scale-up (ratio > 1) missing and set-aside replicas count as 0, on a
scale-down (ratio < 1) missing replicas count as ``missing_fill_down`` (default: the target) and set-aside ones stay
out. If the new ratio is within tolerance or points the other way, nothing changes; else ceil(new ratio × replicas
counted), unless that moves against the new ratio's direction. E.g. samples unready, 50, 70 % against 30 %: ratio
2.0, with the unready one as 0 → 40 % / 30 % = 1.33 → ceil(1.33 × 3) = 4, not the 5 the ready two alone suggest.
Samples 40, unready, unready against 30 %: 1.33, filled → 13 % / 30 % = 0.44, a scale-down: keep the current count.

**Tolerance**: a number t is the band [1 − t, 1 + t]; a pair (down, up) is [1 − down, 1 + up]. The default 0.1 keeps
3 replicas at 20 667 req/s against 20 000 (ratio 1.03).

**One total** (``external_desired_replicas``, Kubernetes ``GetExternalPerPodMetricReplicas`` and
``GetExternalMetricReplicas``). Per replica (AverageValue): the ratio is total / (target × current), and outside the
band the answer is ceil(total / target), e.g. 8600 against 2150 per replica on 3: ratio 1.33 → 4. A value target:
the ratio is total / target and the answer ceil(ratio × ready replicas), e.g. 8600 against 4400 with one of three
ready: ceil(1.95 × 1) = 2. With no current replicas both answer ceil(total / target) (scale from zero).

**Rate limits** (``rate_limited``, Kubernetes ``convertDesiredReplicasWithBehaviorRate`` with
``calculateScaleUpLimitWithScalingRules`` / ``calculateScaleDownLimitWithBehaviors``). Each policy proposes a bound:
("Pods", 4, 15) allows current + 4 up or current − 4 down; ("Percent", 100, 15) allows ceil(current × 2) up or
floor(current × 0) down. "Max" takes the proposal that allows the largest change, "Min" the smallest, "Disabled"
allows none. Then min/max clamp; the reason says which bound bit: 10 → 50 with the Kubernetes defaults below gives
(20, "ScaleUpLimit"); with max_replicas 15 it gives (15, "TooManyReplicas"). A current count outside [min, max] goes
straight to the nearest bound, as Kubernetes' ``reconcileAutoscaler`` does.

**Stabilization** (``stabilized``, Kubernetes ``stabilizeRecommendation``): a scale-down recommendation is raised to
the highest recommendation of the window, e.g. 3 now with 5 a minute ago and a 5-minute window → 5.

Where this differs from Kubernetes, and why:
- Period policies: Kubernetes subtracts the scale events inside each policy's period from the current count to get
  the count at the period's start. The contract's signature carries no event history, so the period starts at
  ``current_replicas`` (every call is the first in its period); ``period_s`` is validated, not used. A caller that
  keeps events passes the period-start count as ``current_replicas``.
- Empty policy lists mean no rate limit in that direction; Kubernetes would block scaling (its API refuses empty lists)
  and, without any behaviour, applies its defaults. Those defaults are ``KUBERNETES_SCALE_UP_POLICIES`` and
  ``KUBERNETES_SCALE_DOWN_POLICIES``.
- One ``select_policy`` serves both directions; Kubernetes has one per direction. Only one direction applies per call
  (desired is above or below current), so a caller disables scale-down alone with
  ``"Disabled" if desired < current else "Max"``.
- Usage is the mean of per-replica samples (equal requests), in floating point; Kubernetes truncates a resource's
  utilization to whole percent and weighs it by each pod's request. For CPU-like semantics pass
  ``missing_fill_down=max(full_utilization, target)``, which Kubernetes uses for resource metrics.
- Ceil and floor ignore floating-point noise below 1e-9: 100 × 1.1 = 110.00000000000001 allows 110, not 111.
- No ready sample at all raises ``ValueError`` (Kubernetes: "did not receive metrics for targeted pods").
- ``stabilized`` keeps recommendations of age ≤ window_s and returns the plain maximum; Kubernetes' behaviour path
  also caps the result at the current count (a caller scaling down uses ``min(current, stabilized(...))``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "KUBERNETES_SCALE_DOWN_POLICIES",
    "KUBERNETES_SCALE_DOWN_WINDOW_S",
    "KUBERNETES_SCALE_UP_POLICIES",
    "ReplicaSample",
    "desired_replicas",
    "external_desired_replicas",
    "rate_limited",
    "stabilized",
]

# One of Kubernetes' HPAScalingPolicy entries: ("Pods" | "Percent", value, period_s). Named a rule here, as
# PolicySettings' scale_up_rules, so that "policy" stays the name of what decides (autoscaler.policy).
ScalingRule = tuple[str, float, float]

# Kubernetes' defaults (HPAScalingRules when an HPA names none): up by 4 pods or 100 % per 15 s, whichever is more;
# down by up to 100 % per 15 s after a 300 s stabilization window.
KUBERNETES_SCALE_UP_POLICIES: tuple[ScalingRule, ...] = (("Pods", 4, 15), ("Percent", 100, 15))
KUBERNETES_SCALE_DOWN_POLICIES: tuple[ScalingRule, ...] = (("Percent", 100, 15),)
KUBERNETES_SCALE_DOWN_WINDOW_S = 300.0

_STATES = frozenset({"ready", "unready", "pending", "failed"})
_POLICY_KINDS = frozenset({"Pods", "Percent"})
_SELECT_POLICIES = frozenset({"Max", "Min", "Disabled"})
_NOISE_DIGITS = 9


@dataclass(frozen=True)
class ReplicaSample:
    """One replica's metric (utilization ratio or value; None = no sample) and its lifecycle state."""

    value: float | None
    state: str = "ready"  # "ready" | "unready" | "pending" | "failed"

    def __post_init__(self) -> None:
        if self.state not in _STATES:
            raise ValueError(f"state: {self.state!r} is not one of {sorted(_STATES)}")
        if self.value is not None and not (math.isfinite(self.value) and self.value >= 0):
            raise ValueError(f"value: {self.value!r} is not a finite number >= 0")


def desired_replicas(
    current_replicas: int,
    samples: Sequence[ReplicaSample],
    target: float,
    *,
    tolerance: float | tuple[float, float] = 0.1,
    missing_fill_down: float | None = None,
    readiness_matters: bool = True,
) -> int:
    """Replicas that bring the mean per-replica metric to ``target`` (Kubernetes ``calcPlainMetricReplicas``)."""
    _check_count("current_replicas", current_replicas)
    _check_target(target)
    band = _band(tolerance)
    if missing_fill_down is not None and not (math.isfinite(missing_fill_down) and missing_fill_down >= 0):
        raise ValueError(f"missing_fill_down: {missing_fill_down!r} is not a finite number >= 0")
    ready, set_aside, missing = _group(samples, readiness_matters)
    if not ready:
        raise ValueError("samples: no ready replica has a sample")

    ratio = sum(ready) / len(ready) / target
    scale_up_with_set_aside = set_aside > 0 and ratio > 1
    if not scale_up_with_set_aside and missing == 0:
        return current_replicas if _within(ratio, band) else _ceil(sum(ready) / target)

    counted = list(ready)
    if ratio < 1:
        counted += [target if missing_fill_down is None else missing_fill_down] * missing
    elif ratio > 1:
        counted += [0.0] * missing
    if scale_up_with_set_aside:
        counted += [0.0] * set_aside
    new_ratio = sum(counted) / len(counted) / target
    if _within(new_ratio, band) or (ratio < 1 < new_ratio) or (ratio > 1 > new_ratio):
        return current_replicas
    replicas = _ceil(sum(counted) / target)
    # e.g. 2 current, samples 10, 10, (missing → 17) against 17: new ratio 0.73 asks for ceil(37 / 17) = 3; keep 2
    if (new_ratio < 1 and replicas > current_replicas) or (new_ratio > 1 and replicas < current_replicas):
        return current_replicas
    return replicas


def external_desired_replicas(
    current_replicas: int,
    ready_replicas: int,
    total: float,
    target: float,
    *,
    per_replica: bool,
    tolerance: float | tuple[float, float] = 0.1,
) -> int:
    """Replicas for one total (queue depth, request rate): per replica (AverageValue) or for the whole (Value)."""
    _check_count("current_replicas", current_replicas)
    _check_count("ready_replicas", ready_replicas)
    if not (math.isfinite(total) and total >= 0):
        raise ValueError(f"total: {total!r} is not a finite number >= 0")
    _check_target(target)
    band = _band(tolerance)
    if current_replicas == 0:
        return _ceil(total / target)
    if per_replica:
        within = _within(total / (target * current_replicas), band)
        return current_replicas if within else _ceil(total / target)
    within = _within(total / target, band)
    return current_replicas if within else _ceil(total * ready_replicas / target)


def rate_limited(
    current_replicas: int,
    desired: int,
    *,
    min_replicas: int,
    max_replicas: int,
    scale_up_policies: Sequence[ScalingRule],
    scale_down_policies: Sequence[ScalingRule],
    select_policy: str = "Max",
) -> tuple[int, str]:
    """``desired`` held to the per-period policies and to [min, max], with the Kubernetes condition reason."""
    _check_count("current_replicas", current_replicas)
    _check_count("desired", desired)
    _check_count("min_replicas", min_replicas)
    if max_replicas < min_replicas:
        raise ValueError(f"max_replicas: {max_replicas} is below min_replicas {min_replicas}")
    _check_policies("scale_up_policies", scale_up_policies)
    _check_policies("scale_down_policies", scale_down_policies)
    if select_policy not in _SELECT_POLICIES:
        raise ValueError(f"select_policy: {select_policy!r} is not one of {sorted(_SELECT_POLICIES)}")

    if current_replicas > max_replicas:
        return max_replicas, "TooManyReplicas"
    if current_replicas < min_replicas:
        return min_replicas, "TooFewReplicas"
    if desired > current_replicas:
        limit = _scale_up_limit(current_replicas, scale_up_policies, select_policy)
        if limit is not None and limit < max_replicas:
            allowed, reason = limit, "ScaleUpLimit"
        else:
            allowed, reason = max_replicas, "TooManyReplicas"
        if desired > allowed:
            return allowed, reason
    elif desired < current_replicas:
        limit = _scale_down_limit(current_replicas, scale_down_policies, select_policy)
        if limit is not None and limit > min_replicas:
            allowed, reason = limit, "ScaleDownLimit"
        else:
            allowed, reason = min_replicas, "TooFewReplicas"
        if desired < allowed:
            return allowed, reason
    return desired, "DesiredWithinRange"


def stabilized(recommendation: int, recent: Sequence[tuple[int, float]], window_s: float) -> int:
    """The highest of ``recommendation`` and the recent (replicas, age_s) recommendations no older than the window."""
    _check_count("recommendation", recommendation)
    if not (math.isfinite(window_s) and window_s >= 0):
        raise ValueError(f"window_s: {window_s!r} is not a finite number >= 0")
    highest = recommendation
    for replicas, age_s in recent:
        if replicas < 0 or not age_s >= 0:
            raise ValueError(f"recent: ({replicas!r}, {age_s!r}) needs replicas >= 0 and age_s >= 0")
        if age_s <= window_s:
            highest = max(highest, replicas)
    return highest


def _group(samples: Sequence[ReplicaSample], readiness_matters: bool) -> tuple[list[float], int, int]:
    """Ready values, the count set aside (pending; unready when readiness matters) and the count missing a sample.

    Kubernetes ``groupPods``: failed first, then pending, then missing, then unready (which a missing sample wins).
    """
    ready: list[float] = []
    set_aside = missing = 0
    for sample in samples:
        if sample.state == "failed":
            continue
        if sample.state == "pending":
            set_aside += 1
        elif sample.value is None:
            missing += 1
        elif sample.state == "unready" and readiness_matters:
            set_aside += 1
        else:
            ready.append(sample.value)
    return ready, set_aside, missing


def _scale_up_limit(current: int, policies: Sequence[ScalingRule], select_policy: str) -> int | None:
    """The most replicas the policies allow now (``calculateScaleUpLimitWithScalingRules``); None = no limit."""
    if select_policy == "Disabled":
        return current
    if not policies:
        return None
    # Percent rounds up so that a small percentage still allows one more replica: ceil(3 × 1.01) = 4
    proposals = [
        current + int(value) if kind == "Pods" else _ceil(current * (1 + value / 100)) for kind, value, _ in policies
    ]
    return max(proposals) if select_policy == "Max" else min(proposals)


def _scale_down_limit(current: int, policies: Sequence[ScalingRule], select_policy: str) -> int | None:
    """The fewest replicas the policies allow now (``calculateScaleDownLimitWithBehaviors``); None = no limit."""
    if select_policy == "Disabled":
        return current
    if not policies:
        return None
    proposals = [
        current - int(value) if kind == "Pods" else _floor(current * (1 - value / 100)) for kind, value, _ in policies
    ]
    return min(proposals) if select_policy == "Max" else max(proposals)


def _band(tolerance: float | tuple[float, float]) -> tuple[float, float]:
    """(lowest, highest) usage ratio that leaves the replica count alone."""
    down, up = tolerance if isinstance(tolerance, tuple) else (tolerance, tolerance)
    for part in (down, up):
        if not (math.isfinite(part) and part >= 0):
            raise ValueError(f"tolerance: {tolerance!r} needs finite parts >= 0")
    return 1 - down, 1 + up


def _within(ratio: float, band: tuple[float, float]) -> bool:
    return band[0] <= ratio <= band[1]


def _ceil(x: float) -> int:
    return math.ceil(round(x, _NOISE_DIGITS))


def _floor(x: float) -> int:
    return math.floor(round(x, _NOISE_DIGITS))


def _check_count(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name}: {value} is negative")


def _check_target(target: float) -> None:
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target: {target!r} is not a finite number > 0")


def _check_policies(name: str, policies: Sequence[ScalingRule]) -> None:
    for kind, value, period_s in policies:
        if kind not in _POLICY_KINDS:
            raise ValueError(f"{name}: kind {kind!r} is not one of {sorted(_POLICY_KINDS)}")
        if not (math.isfinite(value) and value > 0) or (kind == "Pods" and value != int(value)):
            raise ValueError(f"{name}: {kind} value {value!r} must be > 0 (whole for Pods)")
        if not (math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"{name}: period_s {period_s!r} must be > 0")
