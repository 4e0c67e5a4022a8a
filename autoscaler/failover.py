"""Failovers: a node that went down holding a pool's replicas, and when the pool was ready again without it.

The local actuator opens one when, at a tick, a node with a placement of the pool is no longer up (``detected_at``:
that tick), and closes it at the first tick the pool's ready replicas on the up nodes are back to what was placed
(``ready_at``). Detection-to-ready is the fleet health report's "failover time": the worst of the last hour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Column, Double, Engine, Index, Integer, String, Table, delete, insert, select, update

from collector.tables import metadata

failovers = Table(
    "failovers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pool", String(128), nullable=False),
    Column("node_id", String(128), nullable=False),
    Column("detected_at", Double, nullable=False),
    Column("replicas", Integer, nullable=False),  # the pool's replicas placed on the node when it went down
    Column("ready_at", Double, nullable=True),  # null while the pool is not ready again
    Index(None, "detected_at"),
)

KEEP_SECONDS = 7 * 86_400.0  # a week of failovers: the health report reads the last hour


@dataclass(frozen=True)
class Failover:
    pool: str
    node_id: str
    detected_at: float
    replicas: int
    ready_at: float | None = None

    def seconds(self, now: float) -> float:
        """Detection to ready; for one not ready yet, how long it has been open so far."""
        return (self.ready_at if self.ready_at is not None else now) - self.detected_at


class FailoverStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def detect(self, pool: str, lost: Mapping[str, int], *, now: float) -> None:
        """``lost``: the nodes found down at ``now`` with the pool's replicas placed there, by count."""
        if not lost:
            return
        with self.engine.begin() as conn:
            conn.execute(delete(failovers).where(failovers.c.detected_at < now - KEEP_SECONDS))
            conn.execute(
                insert(failovers),
                [{"pool": pool, "node_id": n, "detected_at": now, "replicas": c} for n, c in sorted(lost.items())],
            )

    def ready(self, pool: str, *, now: float) -> None:
        """The pool is back to what was placed: every failover of it still open closes at ``now``."""
        with self.engine.begin() as conn:
            conn.execute(
                update(failovers).where(failovers.c.pool == pool, failovers.c.ready_at.is_(None)).values(ready_at=now)
            )

    def open_pools(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.scalars(select(failovers.c.pool).where(failovers.c.ready_at.is_(None)).distinct()))

    def since(self, start: float) -> list[Failover]:
        """The failovers detected at or after ``start``, oldest first."""
        t = failovers.c
        query = (
            select(t.pool, t.node_id, t.detected_at, t.replicas, t.ready_at)
            .where(t.detected_at >= start)
            .order_by(t.detected_at, t.id)
        )
        with self.engine.connect() as conn:
            return [Failover(*row) for row in conn.execute(query)]
