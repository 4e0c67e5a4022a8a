"""The ``local`` actuator: replicas run by the fleetpilot agents, told through the ingest answer's ``desired``.

``apply(pool, n, fleet)`` places ``n`` replicas over the up nodes that can run the pool — its engine and model
declared there, its node selector matched, GPUs big enough (:func:`autoscaler.placement.unfit`) — by free
accelerator units and routing weight (:func:`autoscaler.placement.place`), and stores the placement. Applied every
controller tick, so a node that goes down loses its share at the next tick and the others take it over (failover:
node down after ``node_down_after_seconds``, re-placed at the next tick, told at the next push; each such loss is
recorded with the time the pool was ready again, :mod:`autoscaler.failover`). When fewer than asked fit, the note
says why per node; when none do, :class:`NoPlacement`.

After every pool of the tick, ``publish`` puts the pools part on the desired-state board (:mod:`fleet.desired`);
each node's next ingest answer carries it. What a node is told (:func:`pools_part`): every managed pool (one with a
placement) at its share with what it runs (engine or built-in kind, model, GPUs, GPU memory), 0 where it has none
but runs it, and every other pool it reports at what it runs now — ``desired`` replaces the node's whole pool set,
so an unmanaged pool must be restated to keep running. A deleted pool (retired, :meth:`PlacementStore.retire`) is
told at 0 to every up node still running it, until none does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

from sqlalchemy import Column, Double, Engine, Integer, String, Table, delete, select

from autoscaler.actuators.base import NoPlacement
from autoscaler.failover import FailoverStore
from autoscaler.placement import Room, Slot, layout_text, place, shortfall, unfit
from autoscaler.routing import routing_weights
from collector.database import insert_for
from collector.tables import metadata
from fleet.desired import DesiredBoard, DesiredPart, Part
from fleet.pools import Pool, PoolSpec, PoolStore, coefficients
from fleet.view import FleetView
from wire.control import DesiredState, PoolDesired

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


def pool_desired(spec: PoolSpec, replicas: int) -> PoolDesired:
    """A managed pool as a node is told it: a built-in engine as ``kind``, a profile as ``engine`` with its model."""
    return PoolDesired(
        replicas=replicas,
        kind=spec.engine if spec.builtin else None,
        engine=None if spec.builtin else spec.engine,
        model=spec.model,
        gpus=spec.gpus_per_replica,
        gpu_memory_mib=spec.gpu_memory_mib,
    )


def pools_part(
    fleet: FleetView, layout: Layout, retired: Collection[str], specs: Mapping[str, PoolSpec]
) -> DesiredPart:
    """The pools part of the board for every up node (module docstring); empty (nothing said, each agent keeps its
    own pools) while no pool is managed and no retired pool runs anywhere. ``specs`` holds every managed pool's.
    Chat placed 2 on node a and none on b, which also runs vision (unmanaged, 3 replicas) and the deleted pool old:
    a → chat 2; b → chat 0, vision 3, old 0.
    """
    running = running_on_nodes(fleet)
    draining = set(retired) & {pool for on in running.values() for pool in on}
    if not layout and not draining:
        return DesiredPart()
    nodes = {}
    for node in sorted(fleet.up_nodes):
        on = running.get(node, {})
        pools = {
            name: PoolDesired(replicas=count)
            for name, count in on.items()
            if name not in layout and name not in retired
        }
        for name, shares in layout.items():
            share = shares.get(node, 0)
            if share > 0 or name in on:
                pools[name] = pool_desired(specs[name], share)
        pools.update({name: PoolDesired(replicas=0) for name in draining if name in on})
        nodes[node] = DesiredState(pools=dict(sorted(pools.items())))
    return DesiredPart(nodes=nodes)


def running_on_nodes(fleet: FleetView) -> dict[str, dict[str, int]]:
    """node → pool → its current replicas there (ready + starting), as the up nodes report them."""
    running: dict[str, dict[str, int]] = defaultdict(dict)
    for p in fleet.pools_on_nodes:
        running[p.node_id][p.pool] = p.current
    return dict(running)


def still_running(fleet: FleetView, pools: Collection[str]) -> set[str]:
    """Those of ``pools`` that some up node runs a replica of (ready or starting)."""
    return {p.pool for p in fleet.pools_on_nodes if p.pool in pools and p.current > 0}


def units_held(
    node: str, running: Mapping[str, int], layout: Layout, per_replica: Mapping[str, int], *, besides: str
) -> int:
    """Accelerator units the pools other than ``besides`` hold on ``node``: each pool's replicas there — the more of
    placed and running, so a replica still starting or not yet drained keeps its units — times its GPUs per replica
    (1 for a pool not in the registry). vision placed 2 running 3 at 2 GPUs, old running 1: 3 × 2 + 1 = 7."""
    names = (set(running) | {name for name, shares in layout.items() if node in shares}) - {besides}
    return sum(
        per_replica.get(name, 1) * max(layout.get(name, {}).get(node, 0), running.get(name, 0)) for name in names
    )


class LocalActuator:
    name = "local"

    def __init__(self, engine: Engine, *, board: DesiredBoard) -> None:
        self.store = PlacementStore(engine)
        self.failovers = FailoverStore(engine)
        self.pools = PoolStore(engine)
        self.board = board

    def current_replicas(self, pool: Pool, fleet: FleetView) -> int | None:
        """Current = ready + starting replicas the up nodes report (docs/architecture.md, glossary)."""
        return sum(p.current for p in fleet.pools_on_nodes if p.pool == pool.name)

    def apply(self, pool: Pool, replicas: int, fleet: FleetView) -> str:
        layout = self.store.layout()
        placed_now = layout.get(pool.name, {})
        lost = {node: count for node, count in placed_now.items() if count > 0 and node not in fleet.up_nodes}
        self.failovers.detect(pool.name, lost, now=fleet.now)
        rooms, unfit_nodes = self._rooms(pool, fleet, layout)
        weights = routing_weights([n for n in fleet.node_loads if n.node_id in rooms], coefficients(pool.spec))
        shares = place(replicas, [Slot(n, r.mine, weights.get(n, 0.5), r.free) for n, r in rooms.items()])
        self.store.place(pool.name, shares, candidates=list(rooms), now=fleet.now)
        placed = sum(shares.values())
        if placed < replicas:
            note = shortfall(replicas, shares, rooms, unfit_nodes)
            if placed == 0:
                raise NoPlacement(note)
            return note
        return f"placed {placed} on {layout_text(shares)}" if placed else "no replicas"

    def _rooms(self, pool: Pool, fleet: FleetView, layout: Layout) -> tuple[dict[str, Room], dict[str, str]]:
        """The candidate up nodes with their room for the pool, and why each other up node is none."""
        running = running_on_nodes(fleet)
        per_replica = {p.name: p.spec.gpus_per_replica for p in self.pools.list()}
        placed_now = layout.get(pool.name, {})
        rooms, unfit_nodes = {}, {}
        for node in sorted(fleet.up_nodes):
            on, supply = running.get(node, {}), fleet.supply_of(node)
            why = unfit(pool.spec, supply, runs_pool=pool.name in on)
            if why is not None:
                unfit_nodes[node] = why
                continue
            rooms[node] = Room(
                units=fleet.node_replica_slots.get(node, 0),
                taken=units_held(node, on, layout, per_replica, besides=pool.name),
                per_replica=pool.spec.gpus_per_replica,
                mine=placed_now.get(node, on.get(pool.name, 0)),
                gpus=bool(supply.gpu_memory_mib),
            )
        return rooms, unfit_nodes

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        """Put the pools part for every up node on the board (written only when it changed). A placement of a pool
        no longer in the registry (deleted while a tick was placing it) is retired like the delete itself. A
        failover still open closes once its pool's ready replicas are back to what is placed."""
        specs = {p.name: p.spec for p in pools}
        layout = self.store.layout()
        for pool in set(layout) - set(specs):
            self.store.retire(pool, now=fleet.now)
        self._close_failovers(fleet, layout)
        retired = self.store.retired()
        done = (retired & set(specs)) | (retired - still_running(fleet, retired))  # created again, or drained
        part = pools_part(fleet, {p: s for p, s in layout.items() if p in specs}, retired - set(specs), specs)
        self.store.forget_retired(done)
        if self.board.part(Part.POOLS) != part:
            self.board.publish(Part.POOLS, part, now=fleet.now)

    def _close_failovers(self, fleet: FleetView, layout: Layout) -> None:
        ready = fleet.ready_replicas()
        for pool in self.failovers.open_pools():
            if ready.get(pool, 0) >= sum(layout.get(pool, {}).values()):
                self.failovers.ready(pool, now=fleet.now)
