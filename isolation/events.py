"""What the enforcer records: every throttle and restore as an event, and the throttle levels standing now.

An event keeps the tenant, the scope (``node/pool``), the kind (``throttle`` | ``restore``), the reason from
:class:`isolation.noisy.ActionReason`, the level before and after, the message in words and the figures that
decided it. The standing levels (one row per throttled tenant on one node's pool) are what the ingest answer
multiplies the tenant's admission limits by, and what a restarted or newly elected enforcer starts from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Double,
    Engine,
    Index,
    Integer,
    String,
    Table,
    delete,
    insert,
    select,
)

from collector.tables import metadata

enforcement_events = Table(
    "enforcement_events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("ts", Double, nullable=False),
    Column("tenant", String(128), nullable=False),
    Column("node", String(128), nullable=False),
    Column("pool", String(128), nullable=False),
    Column("kind", String(16), nullable=False),  # throttle | restore
    Column("reason", String(32), nullable=False),
    Column("level_from", Double, nullable=False),
    Column("level_to", Double, nullable=False),
    Column("message", String(2000), nullable=False),
    Column("figures", JSON, nullable=False),
    Index(None, "tenant", "id"),
)

# Only tenants below level 1 have a row: a restore to 1 deletes it.
throttle_levels = Table(
    "throttle_levels",
    metadata,
    Column("node", String(128), primary_key=True),
    Column("pool", String(128), primary_key=True),
    Column("tenant", String(128), primary_key=True),
    Column("level", Double, nullable=False),
    Column("changed_at", Double, nullable=False),
)


@dataclass(frozen=True)
class EnforcementEvent:
    ts: float
    tenant: str
    node: str
    pool: str
    kind: str
    reason: str
    level_from: float
    level_to: float
    message: str
    figures: Mapping[str, Any]
    id: int | None = None

    @property
    def scope(self) -> str:
        return f"{self.node}/{self.pool}"


@dataclass(frozen=True)
class ThrottleLevel:
    node: str
    pool: str
    tenant: str
    level: float
    changed_at: float


class EnforcementStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, events: Sequence[EnforcementEvent]) -> None:
        """Store the events and move each tenant's standing level to the event's ``level_to``, in one transaction."""
        with self.engine.begin() as conn:
            for event in events:
                values = {k: v for k, v in vars(event).items() if k != "id"}
                values["message"] = event.message[:2000]
                values["figures"] = dict(event.figures)
                conn.execute(insert(enforcement_events).values(**values))
                self._set_level(conn, event)

    @staticmethod
    def _set_level(conn: Connection, event: EnforcementEvent) -> None:
        key = (
            throttle_levels.c.node == event.node,
            throttle_levels.c.pool == event.pool,
            throttle_levels.c.tenant == event.tenant,
        )
        conn.execute(delete(throttle_levels).where(*key))
        if event.level_to < 1.0:
            conn.execute(
                insert(throttle_levels).values(
                    node=event.node, pool=event.pool, tenant=event.tenant, level=event.level_to, changed_at=event.ts
                )
            )

    def levels(self) -> list[ThrottleLevel]:
        """The standing throttles, by node and pool."""
        c = throttle_levels.c
        query = select(throttle_levels).order_by(c.node, c.pool, c.tenant)
        with self.engine.connect() as conn:
            return [ThrottleLevel(**dict(r._mapping)) for r in conn.execute(query)]

    def forget_pool(self, pool: str) -> None:
        """Delete the standing throttles on ``pool`` everywhere (the pool was deleted; its events stay history)."""
        with self.engine.begin() as conn:
            conn.execute(delete(throttle_levels).where(throttle_levels.c.pool == pool))

    def list(self, *, tenant: str | None = None, before: int | None = None, limit: int = 100) -> list[EnforcementEvent]:
        """Newest first; ``before`` is the id cursor of the previous page."""
        query = select(enforcement_events).order_by(enforcement_events.c.id.desc()).limit(limit)
        if tenant is not None:
            query = query.where(enforcement_events.c.tenant == tenant)
        if before is not None:
            query = query.where(enforcement_events.c.id < before)
        with self.engine.connect() as conn:
            return [EnforcementEvent(**dict(r._mapping)) for r in conn.execute(query)]
