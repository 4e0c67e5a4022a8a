"""The ``local`` actuator: replicas run by the fleetpilot agents, told through the ingest answer's ``desired``.

``apply(pool, n)`` places ``n`` replicas over the up nodes that run the pool (:func:`autoscaler.placement.place`,
by free slots and routing weight) and stores the placement; each node's next ingest answer carries its share.
Applied every controller tick, so a node that goes down loses its share at the next tick and the others take it
over (failover: node down after ``node_down_after_seconds``, re-placed at the next tick, told at the next push).

What a node is told (``desired_for_node``): every managed pool (one with a placement) at its share, 0 where it has
none, and every other pool it reports at what it runs now — ``desired`` replaces the node's whole pool set, so an
unmanaged pool must be restated to keep running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Column, Double, Engine, Integer, String, Table, delete, select

from autoscaler.actuators.base import ActuationError
from autoscaler.placement import Slot, place
from autoscaler.routing import routing_weights
from collector.database import insert_for
from collector.registry import read_latest, replica_counts
from collector.tables import metadata
from fleet.pools import Coefficients
from fleet.view import FleetView, read_fleet

placements = Table(
    "placements",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("node_id", String(128), primary_key=True),
    Column("replicas", Integer, nullable=False),
    Column("updated_at", Double, nullable=False),
)


class LocalActuator:
    name = "local"

    def __init__(
        self,
        engine: Engine,
        *,
        node_down_after_seconds: float,
        cpu_replicas_per_node: int = 4,
        coefficients: Callable[[str], Coefficients] = lambda _pool: Coefficients(),
        clock: Callable[[], float] = time.time,
        cache_seconds: float = 1.0,
    ) -> None:
        self.engine = engine
        self.cache_seconds = cache_seconds
        self._cached: tuple[float, dict[str, dict[str, int]]] | None = None  # (read at, pool → node → replicas)
        self._cache_lock = threading.Lock()
        self.down_after = node_down_after_seconds
        self.cpu_replicas_per_node = cpu_replicas_per_node
        self.coefficients = coefficients
        self.clock = clock
        upsert = insert_for(engine, placements)
        self._upsert = upsert.on_conflict_do_update(
            index_elements=["pool", "node_id"],
            set_={"replicas": upsert.excluded.replicas, "updated_at": upsert.excluded.updated_at},
        )

    def _fleet(self) -> FleetView:
        with self.engine.connect() as conn:
            return read_fleet(
                conn,
                now=self.clock(),
                down_after_seconds=self.down_after,
                cpu_replicas_per_node=self.cpu_replicas_per_node,
            )

    def current(self, pool: str) -> int | None:
        fleet = self._fleet()
        return sum(p.ready for p in fleet.pools_on_nodes if p.pool == pool)

    def apply(self, pool: str, replicas: int) -> str:
        fleet = self._fleet()
        candidates = sorted({p.node_id for p in fleet.pools_on_nodes if p.pool == pool})
        if replicas > 0 and not candidates:
            raise ActuationError(f"no node that is up runs pool {pool!r}: nowhere to place {replicas} replicas")
        with self.engine.connect() as conn:
            placed_now = {
                r.node_id: r.replicas for r in conn.execute(select(placements).where(placements.c.pool == pool))
            }
        weights = routing_weights([n for n in fleet.node_loads if n.node_id in candidates], self.coefficients(pool))
        slots = []
        for node in candidates:
            reported = next(
                (p.ready + p.starting for p in fleet.pools_on_nodes if p.pool == pool and p.node_id == node), 0
            )
            mine = placed_now.get(node, reported)
            others = fleet.replicas_on_node(node) - reported
            free = max(0, fleet.node_replica_slots.get(node, self.cpu_replicas_per_node) - others - mine)
            slots.append(Slot(node, mine, weights.get(node, 0.5), free))
        shares = place(replicas, slots)
        now = self.clock()
        with self.engine.begin() as conn:
            conn.execute(delete(placements).where(placements.c.pool == pool, placements.c.node_id.not_in(candidates)))
            if shares:
                conn.execute(
                    self._upsert,
                    [{"pool": pool, "node_id": n, "replicas": c, "updated_at": now} for n, c in shares.items()],
                )
        with self._cache_lock:
            self._cached = None  # this server's next ingest answers see the new placement at once
        placed = sum(shares.values())
        layout = ", ".join(f"{n}: {c}" for n, c in sorted(shares.items()))
        if placed < replicas:
            return f"placed {placed} of {replicas} (no free slot for the rest) on {layout}"
        return f"placed {placed} on {layout}" if layout else "no replicas"

    def placements(self) -> dict[str, dict[str, int]]:
        """Every managed pool's replicas per node, read at most once per ``cache_seconds`` (every ingest request
        asks; the controller changes them every few seconds at most, and ``apply`` refreshes this server's copy)."""
        now = time.monotonic()
        with self._cache_lock:
            if self._cached is not None and now - self._cached[0] < self.cache_seconds:
                return self._cached[1]
        layout: dict[str, dict[str, int]] = {}
        with self.engine.connect() as conn:
            for pool, node, count in conn.execute(
                select(placements.c.pool, placements.c.node_id, placements.c.replicas)
            ):
                layout.setdefault(pool, {})[node] = count
        with self._cache_lock:
            self._cached = (now, layout)
        return layout

    def desired_for_node(self, node_id: str) -> dict[str, Any] | None:
        """The ``desired`` pools for a node's ingest answer; None while no pool is managed (the agent keeps its own).

        Called on every ingest request: the cached placements, and the node's own latest series (it is pushing, so
        up) only when some pool is managed.
        """
        managed = self.placements()
        if not managed:
            return None
        with self.engine.connect() as conn:
            running = {s.pool: sum(replica_counts(s.extra)) for s in read_latest(conn, [node_id]) if s.pool is not None}
        pools = {name: {"replicas": count} for name, count in running.items() if name not in managed}
        for name, layout in managed.items():
            share = layout.get(node_id, 0)
            if share > 0 or name in running:
                pools[name] = {"replicas": share}
        return {"pools": pools}
