"""Noisy-neighbour detection with hysteresis, pure: the previous state and one window's usage in, the new state and
the actions out.

A *scope* is what tenants contend for: a device (``"node-1/gpu0"``) or a pool. Each window gives, per tenant in a
scope, its share of the scope's compute (requests, tokens or GPU time, 0..1), its p99 latency and its SLO target.

- **Distress**: a latency-critical tenant in the scope misses its SLO (p99 > target). **Calm**: every
  latency-critical tenant with traffic is within the SLO with a margin (p99 < ``calm_ratio`` × target), or there is
  none to protect. Between the two (0.8–1.0 × target by default) a window is neither, and breaks both streaks.
- **Noisy**: a tenant that is not latency-critical and, in a distress window, takes more than
  ``noisy_compute_share`` of the scope (80 %) or more than its own quota share plus ``quota_margin``. A
  latency-critical tenant is never throttled on behalf of another.
- **Throttle** after ``trigger_windows`` consecutive noisy windows (3: never on the first), multiplying the tenant's
  level by ``throttle_factor`` (½) down to ``floor_level``; noise that goes on throttles again after another 3.
  **Restore** a throttled tenant one step (level ÷ ½, up to 1) after ``calm_windows`` consecutive calm windows, and
  the next step only after as many more. Worked: noisy windows 1, 2, 3 → level 0.5 at the third; 4, 5, 6 noisy →
  0.25; then calm windows 7, 8, 9 → 0.5 at the ninth, 10, 11, 12 → 1.0. Windows alternating distress and calm never
  reach either streak, so nothing flaps.
- The level is what the enforcer loop multiplies the tenant's planned limits by (:mod:`isolation.planning`): its
  rate, concurrency and thread share.
- **Missing data**: a scope where a tenant has no usage sample (or a latency-critical tenant with traffic has no
  p99) is not judged; its streaks restart and a ``hold`` action with reason ``MissingSamples`` says so. A scope
  with no observation at all is the same. A tenant left out of an observed scope (it sent nothing) keeps its level
  and restarts its streaks: it is restored only on windows where it is seen, so it is not let loose unobserved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from enum import StrEnum

__all__ = [
    "Action",
    "ActionKind",
    "ActionReason",
    "EnforcerSettings",
    "EnforcerState",
    "ScopeObservation",
    "TenantEnforcement",
    "TenantUsage",
    "decide",
]

Figure = float | int | str | None
Key = tuple[str, str]  # (scope, tenant)


class ActionKind(StrEnum):
    THROTTLE = "throttle"
    RESTORE = "restore"
    HOLD = "hold"


class ActionReason(StrEnum):
    NOISY_NEIGHBOUR = "NoisyNeighbour"
    CALM = "Calm"
    MISSING_SAMPLES = "MissingSamples"


@dataclass(frozen=True)
class EnforcerSettings:
    noisy_compute_share: float = 0.8  # a tenant above this share of the scope's compute is noisy
    quota_margin: float = 0.1  # ... or above its own quota share + this
    trigger_windows: int = 3  # N: consecutive noisy windows before a throttle step
    calm_windows: int = 3  # M: consecutive calm windows before a restore step
    calm_ratio: float = 0.8  # calm: latency-critical p99 below this × target
    throttle_factor: float = 0.5  # each throttle step multiplies the level by this
    floor_level: float = 0.125  # the lowest level

    def __post_init__(self) -> None:
        for name in ("noisy_compute_share", "calm_ratio", "throttle_factor", "floor_level"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name}: must be in (0, 1), got {value}")
        if self.quota_margin < 0:
            raise ValueError(f"quota_margin: must be >= 0, got {self.quota_margin}")
        if self.trigger_windows < 1 or self.calm_windows < 1:
            raise ValueError("trigger_windows and calm_windows must be >= 1")


@dataclass(frozen=True)
class TenantUsage:
    """One tenant in one scope over the last window; None marks a missing sample."""

    tenant: str
    slo_class: str  # "latency_critical" | "standard" | "batch"
    compute_share: float | None  # of the scope's compute, 0..1
    latency_p99_seconds: float | None = None  # None with compute_share 0: no traffic
    slo_p99_seconds: float | None = None  # the tenant's target; None: nothing to judge it by
    quota_share: float | None = None  # its own share of the scope, 0..1 (thread percentage / 100)


@dataclass(frozen=True)
class ScopeObservation:
    scope: str
    tenants: tuple[TenantUsage, ...]


@dataclass(frozen=True)
class TenantEnforcement:
    """One tenant's standing in one scope: its level (1.0 = not throttled) and its current streaks."""

    level: float = 1.0
    noisy_windows: int = 0
    calm_windows: int = 0
    changed_at: float | None = None


@dataclass(frozen=True)
class EnforcerState:
    """Per (scope, tenant); a tenant at level 1.0 with no streak is left out."""

    tenants: Mapping[Key, TenantEnforcement] = field(default_factory=dict)
    decided_at: float | None = None

    def level(self, scope: str, tenant: str) -> float:
        return self.tenants.get((scope, tenant), TenantEnforcement()).level


@dataclass(frozen=True)
class Action:
    """A change (or a reasoned hold) for one tenant in one scope; ``tenant`` is None for a whole-scope hold."""

    kind: ActionKind
    reason: ActionReason
    scope: str
    tenant: str | None
    level_from: float | None
    level_to: float | None
    message: str
    figures: Mapping[str, Figure]
    at: float


@dataclass(frozen=True)
class _Window:
    """One scope's judgement: the worst latency-critical p99 over its target (None: no one to judge) and calm."""

    worst: tuple[float, TenantUsage] | None
    calm: bool

    @property
    def victim(self) -> TenantUsage | None:
        """The latency-critical tenant missing its SLO by the most, if one misses it."""
        return self.worst[1] if self.worst is not None and self.worst[0] > 1 else None


def decide(
    state: EnforcerState, observations: Sequence[ScopeObservation], settings: EnforcerSettings, now: float
) -> tuple[EnforcerState, list[Action]]:
    """One window's decisions; ``now`` must be after the previous call's, so a window is never counted twice."""
    if state.decided_at is not None and now <= state.decided_at:
        raise ValueError(f"now: {now} is not after the last decision at {state.decided_at}")
    observed = {obs.scope: obs for obs in observations}
    if len(observed) != len(observations):
        raise ValueError("observations: a scope is listed twice")
    entries = dict(state.tenants)
    actions: list[Action] = []
    for scope in sorted(set(observed) | {scope for scope, _ in entries}):
        obs = observed.get(scope, ScopeObservation(scope, ()))
        missing = _missing(obs)
        if missing is not None:
            actions.append(_hold(entries, scope, missing, now))
            continue
        window = _judge(obs, settings)
        _restart_streaks(entries, scope, skip={usage.tenant for usage in obs.tenants})
        for usage in obs.tenants:
            key = (scope, usage.tenant)
            entries[key], action = _step(entries.get(key, TenantEnforcement()), usage, window, settings, scope, now)
            actions.extend([action] if action else [])
    kept = {key: e for key, e in entries.items() if (e.level, e.noisy_windows, e.calm_windows) != (1.0, 0, 0)}
    return EnforcerState(kept, now), actions


def _missing(obs: ScopeObservation) -> str | None:
    """Why the scope cannot be judged this window, or None when it can."""
    if not obs.tenants:
        return "no usage samples for the scope"
    for usage in obs.tenants:
        if usage.compute_share is None:
            return f"no usage sample for tenant {usage.tenant}"
        if _judged(usage) and usage.compute_share > 0 and usage.latency_p99_seconds is None:
            return f"no p99 latency for latency-critical tenant {usage.tenant}, which had traffic"
    return None


def _judged(usage: TenantUsage) -> bool:
    """A latency-critical tenant with a target: the tenants whose latency decides distress and calm."""
    return usage.slo_class == "latency_critical" and usage.slo_p99_seconds is not None


def _judge(obs: ScopeObservation, settings: EnforcerSettings) -> _Window:
    ratios = [
        (usage.latency_p99_seconds / usage.slo_p99_seconds, usage)
        for usage in obs.tenants
        if _judged(usage) and usage.latency_p99_seconds is not None and usage.slo_p99_seconds
    ]
    worst = max(ratios, key=lambda pair: pair[0], default=None)
    return _Window(worst, calm=worst is None or worst[0] < settings.calm_ratio)


def _noisy_threshold(usage: TenantUsage, settings: EnforcerSettings) -> float:
    """The share above which the tenant is noisy: 0.8 of the scope, or its quota share + margin if that is lower."""
    if usage.quota_share is None:
        return settings.noisy_compute_share
    return min(settings.noisy_compute_share, usage.quota_share + settings.quota_margin)


def _step(
    entry: TenantEnforcement,
    usage: TenantUsage,
    window: _Window,
    settings: EnforcerSettings,
    scope: str,
    now: float,
) -> tuple[TenantEnforcement, Action | None]:
    """Advance one tenant's streaks by one judged window; act when a streak completes."""
    victim = window.victim
    share = usage.compute_share or 0.0
    if victim is not None and usage.slo_class != "latency_critical" and share > _noisy_threshold(usage, settings):
        entry = replace(entry, noisy_windows=entry.noisy_windows + 1, calm_windows=0)
        if entry.noisy_windows < settings.trigger_windows or entry.level <= settings.floor_level:
            return entry, None
        return _throttle(entry, usage, victim, settings, scope, now)
    if not window.calm or entry.level >= 1.0:
        return replace(entry, noisy_windows=0, calm_windows=0), None
    entry = replace(entry, noisy_windows=0, calm_windows=entry.calm_windows + 1)
    if entry.calm_windows < settings.calm_windows:
        return entry, None
    return _restore(entry, usage, window, settings, scope, now)


def _throttle(
    entry: TenantEnforcement,
    usage: TenantUsage,
    victim: TenantUsage,
    settings: EnforcerSettings,
    scope: str,
    now: float,
) -> tuple[TenantEnforcement, Action]:
    share, threshold = usage.compute_share or 0.0, _noisy_threshold(usage, settings)
    level = max(settings.floor_level, entry.level * settings.throttle_factor)
    p99, target = victim.latency_p99_seconds or 0.0, victim.slo_p99_seconds or 0.0
    message = (
        f"{usage.tenant} took {share:.0%} of {scope} (over {threshold:.0%}) for {entry.noisy_windows} windows while "
        f"latency-critical {victim.tenant} missed its SLO (p99 {p99:.3f} s > {target:.3f} s); "
        f"level {entry.level:g} → {level:g}"
    )
    figures: dict[str, Figure] = {
        "compute_share": share,
        "threshold": threshold,
        "windows": entry.noisy_windows,
        "victim": victim.tenant,
        "victim_p99_seconds": p99,
        "victim_slo_p99_seconds": target,
    }
    action = Action(
        ActionKind.THROTTLE,
        ActionReason.NOISY_NEIGHBOUR,
        scope,
        usage.tenant,
        entry.level,
        level,
        message,
        figures,
        now,
    )
    return TenantEnforcement(level, 0, 0, now), action


def _restore(
    entry: TenantEnforcement,
    usage: TenantUsage,
    window: _Window,
    settings: EnforcerSettings,
    scope: str,
    now: float,
) -> tuple[TenantEnforcement, Action]:
    level = min(1.0, entry.level / settings.throttle_factor)
    ratio = None if window.worst is None else round(window.worst[0], 4)
    within = (
        "no latency-critical traffic"
        if ratio is None
        else f"latency-critical p99 at most {ratio:.0%} of the SLO, under {settings.calm_ratio:.0%}"
    )
    message = (
        f"{scope} calm for {entry.calm_windows} windows ({within}); {usage.tenant} level {entry.level:g} → {level:g}"
    )
    figures: dict[str, Figure] = {"windows": entry.calm_windows, "worst_p99_over_slo": ratio}
    action = Action(
        ActionKind.RESTORE, ActionReason.CALM, scope, usage.tenant, entry.level, level, message, figures, now
    )
    return TenantEnforcement(level, 0, 0, now), action


def _hold(entries: dict[Key, TenantEnforcement], scope: str, why: str, now: float) -> Action:
    """Restart the scope's streaks and say why nothing is decided; levels stay where they are."""
    _restart_streaks(entries, scope)
    throttled = sorted(f"{key[1]} at {e.level:g}" for key, e in entries.items() if key[0] == scope and e.level < 1)
    message = f"{scope}: {why} this window; no action" + (f", keeping {', '.join(throttled)}" if throttled else "")
    return Action(ActionKind.HOLD, ActionReason.MISSING_SAMPLES, scope, None, None, None, message, {}, now)


def _restart_streaks(entries: dict[Key, TenantEnforcement], scope: str, skip: Set[str] = frozenset()) -> None:
    """A window without a tenant's data breaks its streaks: "consecutive" counts the windows that were seen."""
    for key, entry in list(entries.items()):
        if key[0] == scope and key[1] not in skip:
            entries[key] = replace(entry, noisy_windows=0, calm_windows=0)
