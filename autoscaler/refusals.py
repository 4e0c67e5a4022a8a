"""NodeRefused events: a node's refusal of the desired state it was told, recorded once per node, pool and reason.

The key is the refusal's ``reason`` (a code, ``TooManyReplicas``), never its ``detail``, which is the agent's free
text: a detail carrying a count or a time changed at every push and added an event to every acting pool each tick.
While the reason stands, a new detail rewrites the note of the events already recorded (the latest detail is the one
shown); a new reason is a new refusal, recorded again; a node that stops refusing clears its record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import Counter

from autoscaler.scaling_events import EventStore, ReasonCode, ScalingEvent
from fleet.pools import Mode, Pool
from fleet.scaling_log import Outcome
from fleet.view import FleetView
from wire.control import DesiredRefusal


@dataclass
class _Standing:
    """What is recorded of one node's standing refusal: its reason, the detail last written, each pool's event."""

    reason: str
    detail: str
    events: dict[str, int] = field(default_factory=dict)  # pool → the id of its NodeRefused event


class RefusalEvents:
    """Records the refusals the up nodes report, after each tick (:meth:`record`)."""

    def __init__(self, events: EventStore, *, actuator: str, counted: Counter | None = None) -> None:
        self.events = events
        self.actuator = actuator
        self.counted = counted  # fleetpilot_autoscaler_scaling_events_total, one per event added
        self._standing: dict[str, _Standing] = {}  # node → its refusal as recorded

    def record(self, pools: Sequence[Pool], fleet: FleetView, now: float) -> None:
        """A NodeRefused event for each pool a node's refusal concerns (:func:`refused_pools`) not yet recorded
        under that reason; the latest detail written to those that are."""
        for node in sorted(fleet.up_nodes):
            refusal = fleet.supply_of(node).refused
            if refusal is None:
                self._standing.pop(node, None)
                continue
            standing = self._standing.get(node)
            if standing is None or standing.reason != refusal.reason:
                standing = self._standing[node] = _Standing(refusal.reason, refusal.detail)
            elif standing.detail != refusal.detail:
                standing.detail = refusal.detail
                for event_id in standing.events.values():
                    self.events.revise(event_id, reason=_in_words(node, refusal), note=refusal.detail)
            reported = {p.pool for p in fleet.pools_on_nodes if p.node_id == node}
            for pool in refused_pools(refusal, reported, pools):
                if pool.name not in standing.events:
                    standing.events[pool.name] = self._add(pool, node, refusal, now)

    def _add(self, pool: Pool, node: str, refusal: DesiredRefusal, now: float) -> int:
        replicas = pool.desired_replicas or 0
        event_id = self.events.add(
            ScalingEvent(
                pool=pool.name,
                ts=now,
                from_replicas=replicas,
                to_replicas=replicas,
                policy="node",
                reason=_in_words(node, refusal),
                inputs={"node": node, "refusal": refusal.reason},
                outcome=Outcome.FAILED,
                actuator=self.actuator,
                note=refusal.detail,
                reason_code=ReasonCode.NODE_REFUSED,
            )
        )
        if self.counted is not None:
            self.counted.labels(pool.name, "node", Outcome.FAILED, ReasonCode.NODE_REFUSED.value).inc()
        return event_id


def _in_words(node: str, refusal: DesiredRefusal) -> str:
    return f"node {node} refused the desired state: {refusal.reason}: {refusal.detail}"


def refused_pools(refusal: DesiredRefusal, reported: set[str], pools: Sequence[Pool]) -> list[Pool]:
    """The managed pools a node's refusal concerns: those its detail names (``pools.chat.engine: …``) or the node
    runs; when it names and runs none of them (a whole state refused, e.g. too many replicas, on a node placed new
    pools only), every pool the controller acts on, since none of their placements there starts."""
    acting = [p for p in pools if p.spec.mode is Mode.ACT]
    named = [p for p in acting if f"pools.{p.name}." in refusal.detail or p.name in reported]
    return named or acting
