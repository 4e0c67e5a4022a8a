"""The pools part of the desired state: where each managed pool's replicas are placed, the deleted pools the nodes
still drain, and what each up node is told from them.

The local actuator (:mod:`autoscaler.actuators.local`) places every managed pool each tick and stores the placement
here (:class:`PlacementStore`); after every pool of the tick it publishes :func:`pools_part` on the board
(:mod:`fleet.desired.board`). What a node is told: every managed pool (one with a placement) at its share with what
it runs (engine or built-in kind, model, GPUs, GPU memory), 0 where it has none but runs it, and every other pool it
reports at what it runs now — ``desired`` replaces the node's whole pool set, so an unmanaged pool must be restated
to keep running. A deleted pool (retired, :meth:`PlacementStore.retire`) is told at 0 to every up node still running
it, until none does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from sqlalchemy import Column, Double, Engine, Integer, String, Table, delete, select

from collector.database import insert_for
from collector.tables import metadata
from fleet.desired.board import DesiredPart
from fleet.pools import PoolSpec
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
