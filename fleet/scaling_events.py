"""Scaling events: every decision that changed a pool's desired replicas (or was refused), with its reasons.

An event records the time, the replicas before and after, the policy, the reason in words, the inputs that mattered
(demand, utilization, the forecast's upper bound, the rail that bound it), whether it was applied (``act``), only
advised (``dry_run``), manual, or failed at the actuator — and the actuator's note or error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Double, Engine, Index, Integer, String, Table, insert, select

from collector.tables import metadata

scaling_events = Table(
    "scaling_events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("pool", String(128), nullable=False),
    Column("ts", Double, nullable=False),
    Column("from_replicas", Integer, nullable=False),
    Column("to_replicas", Integer, nullable=False),
    Column("policy", String(32), nullable=False),
    Column("reason", String(2000), nullable=False),
    Column("reason_code", String(32), nullable=True),  # one of ReasonCode; null on events recorded before codes
    Column("inputs", JSON, nullable=False),
    Column("outcome", String(16), nullable=False),  # applied | dry_run | failed
    Column("actuator", String(32), nullable=False),
    Column("note", String(1000), nullable=True),
    Index(None, "pool", "id"),
)


@dataclass(frozen=True)
class ScalingEvent:
    pool: str
    ts: float
    from_replicas: int
    to_replicas: int
    policy: str
    reason: str
    inputs: Mapping[str, Any]
    outcome: str
    actuator: str
    note: str | None = None
    reason_code: str | None = None
    id: int | None = None


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

    def list(self, *, pool: str | None = None, before: int | None = None, limit: int = 100) -> list[ScalingEvent]:
        """Newest first; ``before`` is the id cursor of the previous page."""
        query = select(scaling_events).order_by(scaling_events.c.id.desc()).limit(limit)
        if pool is not None:
            query = query.where(scaling_events.c.pool == pool)
        if before is not None:
            query = query.where(scaling_events.c.id < before)
        with self.engine.connect() as conn:
            return [ScalingEvent(**dict(r._mapping)) for r in conn.execute(query)]
