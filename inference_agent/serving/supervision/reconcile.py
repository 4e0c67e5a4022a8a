"""What the supervisor should do next: a pure function of (target pools, replicas as they are, now).

Each decision carries a reason from a fixed set. Scale-down takes the replicas that cost least to lose first: ones
waiting out a crash back-off, then ones still warming (no work yet), then ready ones with the fewest requests in
flight, newest first; ready ones are drained, never killed. A crashed replica waits ``backoff_s(crashes)`` before
its restart (1 s, 2 s, 4 s, ... up to 60 s); ``crashes`` counts consecutive crashes and clears after a minute ready.

A replica running with other GPU limits than its pool's (MPS reads them once, at the client's start) is replaced
without losing capacity: its replacement starts at once, and the old one drains once a replica with the new limits
is ready to take its place — 2 wanted, 2 old ready → start 2; one new ready → drain one old; both → drain the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.quota import GpuQuota


class Phase(StrEnum):
    STARTING = "starting"  # process running, not yet warm
    READY = "ready"  # warm and routed to
    DRAINING = "draining"  # not routed to; finishing what it has
    BACKOFF = "backoff"  # crashed; no process until its restart time


class Verb(StrEnum):
    START = "start"  # a new replica
    RESTART = "restart"  # a new process for a replica in back-off
    DRAIN = "drain"  # stop routing, ask it to drain
    STOP = "stop"  # SIGTERM and forget (nothing in flight, or the drain deadline passed)
    FAIL = "fail"  # it never became warm: stop it and count a crash
    FORGET = "forget"  # a replica in back-off that is no longer wanted


class Reason(StrEnum):
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    POOL_REMOVED = "PoolRemoved"
    KIND_CHANGED = "KindChanged"
    LIMITS_CHANGED = "LimitsChanged"
    BACKOFF_ELAPSED = "BackoffElapsed"
    DRAINED = "Drained"
    DRAIN_DEADLINE = "DrainDeadline"
    STARTUP_TIMEOUT = "StartupTimeout"


@dataclass(frozen=True)
class Timing:
    drain_deadline_s: float = 20.0
    startup_timeout_s: float = 300.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    stable_after_s: float = 60.0


@dataclass(frozen=True)
class ReplicaView:
    """One replica as the supervisor sees it; ``since`` is when it entered ``phase`` (monotonic seconds)."""

    id: str
    pool: str
    kind: str  # what it runs (``PoolSpec.runs``): a built-in kind, or an engine profile and its model
    phase: Phase
    since: float
    in_flight: int = 0
    crashes: int = 0
    restart_at: float | None = None
    gpu_quota: GpuQuota = field(default_factory=GpuQuota)  # the MPS limits its process started with


@dataclass(frozen=True)
class Action:
    verb: Verb
    pool: str
    kind: str
    reason: Reason
    replica_id: str | None = None


def backoff_s(crashes: int, timing: Timing) -> float:
    """Wait before restart number ``crashes``: base × 2^(crashes−1), capped — 3 crashes → 4 s."""
    return min(timing.backoff_cap_s, timing.backoff_base_s * 2.0 ** max(0, crashes - 1))


def crashed(view: ReplicaView, now: float, timing: Timing) -> ReplicaView:
    """The replica after its process died unasked (or never got warm): into back-off, one more crash counted."""
    crashes = view.crashes + 1
    return replace(
        view, phase=Phase.BACKOFF, since=now, in_flight=0, crashes=crashes, restart_at=now + backoff_s(crashes, timing)
    )


def settled(view: ReplicaView, now: float, timing: Timing) -> ReplicaView:
    """A replica ready for ``stable_after_s`` has left its crash loop: its next crash waits the base back-off."""
    if view.phase is Phase.READY and view.crashes and now - view.since >= timing.stable_after_s:
        return replace(view, crashes=0)
    return view


def decide(
    target: Mapping[str, PoolSpec],
    replicas: Sequence[ReplicaView],
    now: float,
    timing: Timing,
    timings: Mapping[str, Timing] | None = None,
) -> list[Action]:
    """The actions of one pass; ``timings`` are pools' own (an engine profile's startup timeout and drain grace)."""
    actions: list[Action] = []
    for view in replicas:
        actions.extend(_lifecycle(view, now, (timings or {}).get(view.pool, timing)))
    decided = {a.replica_id for a in actions}
    for pool in sorted({v.pool for v in replicas} | set(target)):
        scaled = _scale(pool, target.get(pool), [v for v in replicas if v.pool == pool], now)
        actions.extend(a for a in scaled if a.replica_id is None or a.replica_id not in decided)
    return actions


def _lifecycle(view: ReplicaView, now: float, timing: Timing) -> list[Action]:
    """What time alone decides for one replica, whatever the target."""
    if view.phase is Phase.DRAINING:
        if view.in_flight == 0:
            return [Action(Verb.STOP, view.pool, view.kind, Reason.DRAINED, view.id)]
        if now - view.since >= timing.drain_deadline_s:
            return [Action(Verb.STOP, view.pool, view.kind, Reason.DRAIN_DEADLINE, view.id)]
    if view.phase is Phase.STARTING and now - view.since >= timing.startup_timeout_s:
        return [Action(Verb.FAIL, view.pool, view.kind, Reason.STARTUP_TIMEOUT, view.id)]
    return []


def _scale(pool: str, spec: PoolSpec | None, views: list[ReplicaView], now: float) -> list[Action]:
    live = [v for v in views if v.phase is not Phase.DRAINING]
    if spec is None:
        return _remove(live, Reason.POOL_REMOVED)
    actions = _remove([v for v in live if v.kind != spec.runs], Reason.KIND_CHANGED)
    same_kind = [v for v in live if v.kind == spec.runs]
    outdated = [v for v in same_kind if v.gpu_quota != spec.gpu_quota]
    current = [v for v in same_kind if v.gpu_quota == spec.gpu_quota]
    surplus = _by_cost(current)[: max(0, len(current) - spec.replicas)]
    actions.extend(_remove(surplus, Reason.SCALE_DOWN))
    kept = [v for v in current if v not in surplus]
    for view in kept:
        if view.phase is Phase.BACKOFF and view.restart_at is not None and view.restart_at <= now:
            actions.append(Action(Verb.RESTART, pool, view.kind, Reason.BACKOFF_ELAPSED, view.id))
    actions.extend(Action(Verb.START, pool, spec.runs, Reason.SCALE_UP) for _ in range(spec.replicas - len(kept)))
    return actions + _replace_outdated(outdated, kept, spec.replicas)


def _replace_outdated(outdated: list[ReplicaView], kept: list[ReplicaView], wanted: int) -> list[Action]:
    """Outdated replicas doing no work go at once; ready ones drain as replicas with the new limits get ready."""
    idle = [v for v in outdated if v.phase is not Phase.READY]
    serving = [v for v in outdated if v.phase is Phase.READY]
    ready_new = sum(v.phase is Phase.READY for v in kept)
    excess = max(0, len(serving) + ready_new - wanted)
    return _remove(idle, Reason.LIMITS_CHANGED) + _remove(_by_cost(serving)[:excess], Reason.LIMITS_CHANGED)


def _by_cost(views: list[ReplicaView]) -> list[ReplicaView]:
    """Cheapest to lose first: back-off, starting, then ready by fewest in flight and newest."""
    rank = {Phase.BACKOFF: 0, Phase.STARTING: 1, Phase.READY: 2}
    return sorted(views, key=lambda v: (rank[v.phase], v.in_flight, -v.since))


def _remove(views: list[ReplicaView], reason: Reason) -> list[Action]:
    verbs = {Phase.BACKOFF: Verb.FORGET, Phase.STARTING: Verb.STOP, Phase.READY: Verb.DRAIN}
    return [Action(verbs[v.phase], v.pool, v.kind, reason, v.id) for v in views if v.phase in verbs]
