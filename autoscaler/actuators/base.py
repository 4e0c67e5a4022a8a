"""How a scaling decision reaches the fleet: one narrow Protocol, one implementation per way of running replicas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from autoscaler.scaling_events import ReasonCode
from fleet.pools import Pool
from fleet.view import FleetView


class ActuationError(Exception):
    """The actuator could not apply (or read) a pool's replicas; the message says why, for the scaling event."""


class NoPlacement(ActuationError):
    """No up node can take any of the pool's replicas; the message says why per node (the event's NoPlacement)."""


class ScaledElsewhere(ActuationError):
    """An HPA or a KEDA ScaledObject scales the pool's target, so it was not patched; ``code`` is the event's reason
    (ScaledByHpa, ScaledByKeda), ``owner`` names it for the pool's ``scaled_by``, the message says why."""

    def __init__(self, message: str, *, owner: str, code: ReasonCode) -> None:
        super().__init__(message)
        self.owner, self.code = owner, code


class Actuator(Protocol):
    """``local`` (the agents, through the ingest answer) or ``kubernetes`` (the scale subresource of the pool's
    ``scale_target``, a Deployment by default).

    Each takes the tick's :class:`FleetView` (read once per tick by the controller); one that has its own view of
    the replicas (a Deployment) ignores it.
    """

    name: str

    def current_replicas(self, pool: Pool, fleet: FleetView) -> int | None:
        """The pool's current replicas, ready + starting (docs/architecture.md, glossary), as the actuator's target
        sees them; None when it cannot tell."""
        ...

    def apply(self, pool: Pool, replicas: int, fleet: FleetView) -> str:
        """Ask for ``replicas`` of the pool (its spec says what a replica needs); returns a short note for the
        scaling event; raises ActuationError on refusal."""
        ...

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        """After every pool of a tick was applied: tell the nodes what they run, where the actuator does it through
        them (local: the pools part of the desired-state board); nothing for one that acts on its own target."""
        ...
