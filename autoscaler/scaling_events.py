"""Scaling events: every decision that changed a pool's desired replicas (or was refused), with its reasons.

An event records the time, the replicas before and after, the policy, the reason in words, the inputs that mattered
(demand, utilization, the forecast's upper bound, the rail that bound it), whether it was applied (``act``), only
advised (``dry_run``), manual, left to the HPA or KEDA ScaledObject that scales the target (``external``), or failed
at the actuator — and the actuator's note or error — and the :class:`ReasonCode` of what decided the replicas: the
metric label, the ``GET /scaling-events?reason=`` filter and what the dashboard colours by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from sqlalchemy import (
    Engine,
    RowMapping,
    insert,
    select,
    update,
)

from fleet.scaling_log import Outcome, scaling_events


class ReasonCode(StrEnum):
    """Why a pool got the replicas it got: the one rule that decided the final count (a rail that bound the policy's
    wish wins over the policy). Values are CamelCase like Kubernetes' condition reasons, and fixed: a label value."""

    STATIC_COUNT = "StaticCount"  # the static policy's fixed count (static_replicas, else min_replicas)
    REACTIVE_UTILIZATION = "ReactiveUtilization"  # demand over current replicas × capacity, against target (HPA)
    FORECAST_PEAK = "ForecastPeak"  # the forecast's upper bound over [startup, startup + margin) at its utilization
    FORECAST_STALE = "ForecastStale"  # no usable forecast (stale, failing or missing): the reactive fallback decided
    # the live forecast scored worse than naive, or its interval covered too little, over the last 24 h: the
    # reactive fallback decided until it recovers (predictor.accuracy)
    FORECAST_INACCURATE = "ForecastInaccurate"
    WITHIN_TOLERANCE = "WithinTolerance"  # the need is within the tolerance of the current count: held
    NO_CAPACITY = "NoCapacity"  # no per-replica capacity configured or learned: nothing to size by, held
    STALE_METRICS = "StaleMetrics"  # demand missing or older than stale_after_seconds: held, never scaled down on it
    REPLICAS_STARTING = "ReplicasStarting"  # the need lies between ready and ready + starting: the starting cover it
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized"  # the stabilization window's higher recommendation held the count
    SCALE_DOWN_FLOOR = "ScaleDownFloor"  # a scale-down stopped where the survivors' load would pass the target
    STEP_LIMIT = "StepLimit"  # the per-period step limit (HPA ScaleUpLimit / ScaleDownLimit) bound the change
    MAX_REPLICAS = "MaxReplicas"  # bound by the pool's max_replicas (HPA TooManyReplicas)
    MIN_REPLICAS = "MinReplicas"  # bound by the pool's min_replicas (HPA TooFewReplicas)
    MANUAL_OVERRIDE = "ManualOverride"  # an operator's manual scale in force
    NO_PLACEMENT = "NoPlacement"  # the actuation failed: no up node can take a replica (each node's reason in the note)
    NODE_REFUSED = "NodeRefused"  # a node refused the desired state it was told (its reason and detail in the event)
    # An HPA or a KEDA ScaledObject scales the pool's target: never patched; the note names the owner, and whether
    # fleetpilot acts through KEDA (its trigger is fleetpilot's external scaler for this pool) or only advises.
    SCALED_BY_HPA = "ScaledByHpa"
    SCALED_BY_KEDA = "ScaledByKeda"


_CODES = frozenset(c.value for c in ReasonCode)


Family = Literal["up", "down", "held", "refused"]

# Codes that say the count did not move on purpose, or could not be acted on, whatever the numbers say.
_FIXED_FAMILY: dict[ReasonCode, Family] = {
    ReasonCode.WITHIN_TOLERANCE: "held",
    ReasonCode.NO_CAPACITY: "refused",
    ReasonCode.STALE_METRICS: "held",
    ReasonCode.REPLICAS_STARTING: "held",
    ReasonCode.NO_PLACEMENT: "refused",
    ReasonCode.NODE_REFUSED: "refused",
    # held, not refused: another autoscaler owning the target is the operator's choice, not a fault to fix
    ReasonCode.SCALED_BY_HPA: "held",
    ReasonCode.SCALED_BY_KEDA: "held",
}


def reason_family(code: ReasonCode | None, from_replicas: int, to_replicas: int) -> Family:
    """The family the dashboard colours an event by: the holds and refusals by their code, every other code by the
    way it moved the pool (a StepLimit that still added 4 replicas is an up; one of 3 → 3 is held)."""
    if code is not None and code in _FIXED_FAMILY:
        return _FIXED_FAMILY[code]
    if to_replicas > from_replicas:
        return "up"
    return "down" if to_replicas < from_replicas else "held"


@dataclass(frozen=True)
class ScalingEvent:
    pool: str
    ts: float
    from_replicas: int
    to_replicas: int
    policy: str
    reason: str
    inputs: Mapping[str, Any]
    outcome: Outcome
    actuator: str
    note: str | None = None
    reason_code: ReasonCode | None = None  # None on events recorded before codes
    id: int | None = None

    @property
    def family(self) -> Family:
        return reason_family(self.reason_code, self.from_replicas, self.to_replicas)


class EventStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, event: ScalingEvent) -> int:
        values = {k: v for k, v in vars(event).items() if k != "id"}
        values["reason"] = event.reason[:2000]
        values["note"] = None if event.note is None else event.note[:1000]
        values["inputs"] = dict(event.inputs)
        with self.engine.begin() as conn:
            key = conn.execute(insert(scaling_events).values(**values)).inserted_primary_key
        return int(key[0]) if key else 0

    def revise(self, event_id: int, *, reason: str, note: str | None) -> None:
        """Rewrite an event's words (a standing refusal's latest detail); its time, counts and code stay."""
        values = {"reason": reason[:2000], "note": None if note is None else note[:1000]}
        with self.engine.begin() as conn:
            conn.execute(update(scaling_events).where(scaling_events.c.id == event_id).values(**values))

    def list(
        self,
        *,
        pool: str | None = None,
        reason: ReasonCode | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[ScalingEvent]:
        """Newest first; ``reason`` keeps the events of that code; ``before`` is the id cursor of the previous page."""
        query = select(scaling_events).order_by(scaling_events.c.id.desc()).limit(limit)
        if pool is not None:
            query = query.where(scaling_events.c.pool == pool)
        if reason is not None:
            query = query.where(scaling_events.c.reason_code == reason.value)
        if before is not None:
            query = query.where(scaling_events.c.id < before)
        with self.engine.connect() as conn:
            return [_event(r._mapping) for r in conn.execute(query)]


def _event(row: RowMapping) -> ScalingEvent:
    values = dict(row)
    code = values.get("reason_code")
    # null before codes; a code this release does not know (written by a newer one) reads as null too
    values["reason_code"] = ReasonCode(code) if code in _CODES else None
    values["outcome"] = Outcome(values["outcome"])
    return ScalingEvent(**values)
