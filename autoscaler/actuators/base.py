"""How a scaling decision reaches the fleet: one narrow Protocol, one implementation per way of running replicas."""

from __future__ import annotations

from typing import Protocol


class ActuationError(Exception):
    """The actuator could not apply (or read) a pool's replicas; the message says why, for the scaling event."""


class Actuator(Protocol):
    """``local`` (the agents, through the ingest answer) or ``kubernetes`` (a Deployment's scale subresource)."""

    name: str

    def current(self, pool: str) -> int | None:
        """The replicas the pool's target runs now as the actuator sees them; None when it cannot tell."""
        ...

    def apply(self, pool: str, replicas: int) -> str:
        """Ask for ``replicas``; returns a short note for the scaling event; raises ActuationError on refusal."""
        ...
