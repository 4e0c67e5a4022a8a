"""The ``local`` actuator: replicas run by the fleetpilot agents, told through the ingest answer's ``desired``.

``apply(pool, n, fleet)`` places ``n`` replicas over the up nodes that run the pool (:func:`autoscaler.placement.place`,
by free slots and routing weight) and stores the placement. Applied every controller tick, so a node that goes down
loses its share at the next tick and the others take it over (failover: node down after ``node_down_after_seconds``,
re-placed at the next tick, told at the next push).

After every pool of the tick, ``publish`` puts the pools part on the desired-state board (:mod:`fleet.desired`);
each node's next ingest answer carries it. What a node is told (:func:`pools_part`): every managed pool (one with a
placement) at its share, 0 where it has none but runs it, and every other pool it reports at what it runs now —
``desired`` replaces the node's whole pool set, so an unmanaged pool must be restated to keep running. A deleted
pool (retired, :meth:`PlacementStore.retire`) is told at 0 to every up node still running it, until none does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from sqlalchemy import Column, Double, Engine, Integer, String, Table, delete, select

from autoscaler.actuators.base import ActuationError
from autoscaler.placement import Slot, place
from autoscaler.routing import routing_weights
from collector.control import DesiredState, PoolDesired
from collector.database import insert_for
from collector.tables import metadata
from fleet.desired import DesiredBoard, DesiredPart, Part
from fleet.pools import Coefficients, Pool
from fleet.view import FleetView

placements = Table(
    "placements",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("node_id", String(128), primary_key=True),
    Column("replicas", Integer, nullable=False),
    Column("updated_at", Double, nullable=False),
)

# A pool deleted while nodes may still run it: told 0 replicas until no up node runs any (then forgotten).
retired_pools = Table(
    "retired_pools",
    metadata,
    Column("pool", String(128), primary_key=True),
    Column("retired_at", Double, nullable=False),
)

Layout = Mapping[str, Mapping[str, int]]  # pool → node → replicas placed there


class PlacementStore:
    """Where each managed pool's replicas are placed, and the retired pools the nodes still drain."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        upsert = insert_for(engine, placements)
        self._upsert = upsert.on_conflict_do_update(
            index_elements=["pool", "node_id"],
            set_={"replicas": upsert.excluded.replicas, "updated_at": upsert.excluded.updated_at},
        )
        retire = insert_for(engine, retired_pools)
        self._retire = retire.on_conflict_do_nothing(index_elements=["pool"])

    def layout(self) -> dict[str, dict[str, int]]:
        """Every managed pool's replicas per node, in one read."""
        layout: dict[str, dict[str, int]] = defaultdict(dict)
        with self.engine.connect() as conn:
            for pool, node, count in conn.execute(
                select(placements.c.pool, placements.c.node_id, placements.c.replicas)
            ):
                layout[pool][node] = count
        return dict(layout)

    def of_pool(self, pool: str) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(placements.c.node_id, placements.c.replicas).where(placements.c.pool == pool))
            return {node: count for node, count in rows}

    def place(self, pool: str, shares: Mapping[str, int], *, candidates: Collection[str], now: float) -> None:
        """The pool's placement is ``shares``; a node that is no candidate any more loses its row."""
        with self.engine.begin() as conn:
            conn.execute(delete(placements).where(placements.c.pool == pool, placements.c.node_id.not_in(candidates)))
            if shares:
                conn.execute(
                    self._upsert,
                    [{"pool": pool, "node_id": n, "replicas": c, "updated_at": now} for n, c in shares.items()],
                )

    def retire(self, pool: str, *, now: float) -> None:
        """The pool is deleted: its placement goes, and the nodes still running it are told 0 until none does."""
        with self.engine.begin() as conn:
            conn.execute(delete(placements).where(placements.c.pool == pool))
            conn.execute(self._retire, [{"pool": pool, "retired_at": now}])

    def retired(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.scalars(select(retired_pools.c.pool)))

    def forget_retired(self, pools: Iterable[str]) -> None:
        names = sorted(pools)
        if names:
            with self.engine.begin() as conn:
                conn.execute(delete(retired_pools).where(retired_pools.c.pool.in_(names)))


def pools_part(fleet: FleetView, layout: Layout, retired: Collection[str]) -> DesiredPart:
    """The pools part of the board for every up node (module docstring); empty (nothing said, each agent keeps its
    own pools) while no pool is managed and no retired pool runs anywhere. Chat placed 2 on node a and none on b,
    which also runs vision (unmanaged, 3 replicas) and the deleted pool old: a → chat 2; b → chat 0, vision 3, old 0.
    """
    running: dict[str, dict[str, int]] = defaultdict(dict)
    for p in fleet.pools_on_nodes:
        running[p.node_id][p.pool] = p.ready + p.starting
    draining = set(retired) & {pool for on in running.values() for pool in on}
    if not layout and not draining:
        return DesiredPart()
    nodes = {}
    for node in sorted(fleet.up_nodes):
        on = running.get(node, {})
        pools = {name: count for name, count in on.items() if name not in layout and name not in retired}
        for name, shares in layout.items():
            share = shares.get(node, 0)
            if share > 0 or name in on:
                pools[name] = share
        pools.update({name: 0 for name in draining if name in on})
        nodes[node] = DesiredState(pools={name: PoolDesired(replicas=n) for name, n in sorted(pools.items())})
    return DesiredPart(nodes=nodes)


def still_running(fleet: FleetView, pools: Collection[str]) -> set[str]:
    """Those of ``pools`` that some up node runs a replica of (ready or starting)."""
    return {p.pool for p in fleet.pools_on_nodes if p.pool in pools and p.ready + p.starting > 0}


class LocalActuator:
    name = "local"

    def __init__(
        self,
        engine: Engine,
        *,
        board: DesiredBoard,
        coefficients: Callable[[str], Coefficients] = lambda _pool: Coefficients(),
    ) -> None:
        self.store = PlacementStore(engine)
        self.board = board
        self.coefficients = coefficients

    def current_replicas(self, pool: str, fleet: FleetView) -> int | None:
        """Current = ready + starting replicas the up nodes report (docs/architecture.md, glossary)."""
        return sum(p.ready + p.starting for p in fleet.pools_on_nodes if p.pool == pool)

    def apply(self, pool: str, replicas: int, fleet: FleetView) -> str:
        candidates = sorted({p.node_id for p in fleet.pools_on_nodes if p.pool == pool})
        if replicas > 0 and not candidates:
            raise ActuationError(f"no node that is up runs pool {pool!r}: nowhere to place {replicas} replicas")
        placed_now = self.store.of_pool(pool)
        weights = routing_weights([n for n in fleet.node_loads if n.node_id in candidates], self.coefficients(pool))
        slots = []
        for node in candidates:
            reported = next(
                (p.ready + p.starting for p in fleet.pools_on_nodes if p.pool == pool and p.node_id == node), 0
            )
            mine = placed_now.get(node, reported)
            others = fleet.replicas_on_node(node) - reported
            free = max(0, fleet.node_replica_slots.get(node, 0) - others - mine)
            slots.append(Slot(node, mine, weights.get(node, 0.5), free))
        shares = place(replicas, slots)
        self.store.place(pool, shares, candidates=candidates, now=fleet.now)
        placed = sum(shares.values())
        layout = ", ".join(f"{n}: {c}" for n, c in sorted(shares.items()))
        if placed < replicas:
            return f"placed {placed} of {replicas} (no free slot for the rest) on {layout}"
        return f"placed {placed} on {layout}" if layout else "no replicas"

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        """Put the pools part for every up node on the board (written only when it changed). A placement of a pool
        no longer in the registry (deleted while a tick was placing it) is retired like the delete itself."""
        names = {p.name for p in pools}
        layout = self.store.layout()
        for pool in set(layout) - names:
            self.store.retire(pool, now=fleet.now)
        retired = self.store.retired()
        done = (retired & names) | (retired - still_running(fleet, retired))  # created again, or drained everywhere
        part = pools_part(fleet, {p: s for p, s in layout.items() if p in names}, retired - names)
        self.store.forget_retired(done)
        if self.board.part(Part.POOLS) != part:
            self.board.publish(Part.POOLS, part, now=fleet.now)
