"""The ``local`` actuator: replicas run by the fleetpilot agents, told through the ingest answer's ``desired``.

``apply(pool, n, fleet)`` places ``n`` replicas over the up nodes that can run the pool — its engine and model
declared there, its node selector matched, GPUs big enough (:func:`autoscaler.placement.unfit`) — by free
accelerator units and routing weight (:func:`autoscaler.placement.place`), and stores the placement. Applied every
controller tick, so a node that goes down loses its share at the next tick and the others take it over (failover:
node down after ``node_down_after_seconds``, re-placed at the next tick, told at the next push; each such loss is
recorded with the time the pool was ready again, :mod:`autoscaler.failover`). When fewer than asked fit, the note
says why per node; when none do, :class:`NoPlacement`.

After every pool of the tick, ``publish`` puts the pools part (:func:`fleet.desired.pools.pools_part`: each up node's
share of every managed pool, its other pools restated, 0 of a deleted one) on the desired-state board; each node's
next ingest answer carries it.

A tick is one fleet view: the controller reads one per tick and hands it to every ``apply`` and to the ``publish``
that ends the tick (:class:`autoscaler.actuators.base.Actuator`). The placements and the pool registry are read at
the tick's first call and kept for the rest of it, the placements updated as the tick writes them (3 pools: one read
of each, where it was 4 of the placements and 3 of the registry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy import Engine

from autoscaler.actuators.base import NoPlacement
from autoscaler.failover import FailoverStore
from autoscaler.placement import Room, Slot, layout_text, place, shortfall, unfit
from autoscaler.routing import routing_weights
from fleet.desired.board import DesiredBoard, Part
from fleet.desired.pools import Layout, PlacementStore, pools_part, running_on_nodes, still_running
from fleet.pools import Pool, PoolStore, coefficients
from fleet.view import FleetView


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


@dataclass
class _Tick:
    """What one tick reads once for all its pools (module docstring)."""

    fleet: FleetView
    layout: dict[str, dict[str, int]]  # the stored placements, with this tick's own written over them
    registry: PoolStore

    @cached_property
    def per_replica(self) -> dict[str, int]:
        """Every registered pool's GPUs per replica, read at the tick's first placement."""
        return {p.name: p.spec.gpus_per_replica for p in self.registry.list()}

    @cached_property
    def running(self) -> dict[str, dict[str, int]]:
        return running_on_nodes(self.fleet)

    def placed(self, pool: str, shares: Mapping[str, int]) -> None:
        """The pool's placement as :meth:`PlacementStore.place` stored it: a row per candidate, none without any."""
        if shares:
            self.layout[pool] = dict(shares)
        else:
            self.layout.pop(pool, None)


class LocalActuator:
    name = "local"

    def __init__(self, engine: Engine, *, board: DesiredBoard) -> None:
        self.store = PlacementStore(engine)
        self.failovers = FailoverStore(engine)
        self.pools = PoolStore(engine)
        self.board = board
        self._tick: _Tick | None = None

    def current_replicas(self, pool: Pool, fleet: FleetView) -> int | None:
        """Current = ready + starting replicas the up nodes report (docs/architecture.md, glossary)."""
        return sum(p.current for p in fleet.pools_on_nodes if p.pool == pool.name)

    def apply(self, pool: Pool, replicas: int, fleet: FleetView) -> str:
        tick = self._tick_of(fleet)
        placed_now = tick.layout.get(pool.name, {})
        lost = {node: count for node, count in placed_now.items() if count > 0 and node not in fleet.up_nodes}
        self.failovers.detect(pool.name, lost, now=fleet.now)
        rooms, unfit_nodes = self._rooms(pool, tick)
        weights = routing_weights([n for n in fleet.node_loads if n.node_id in rooms], coefficients(pool.spec))
        shares = place(replicas, [Slot(n, r.mine, weights.get(n, 0.5), r.free) for n, r in rooms.items()])
        self.store.place(pool.name, shares, candidates=list(rooms), now=fleet.now)
        tick.placed(pool.name, shares)
        placed = sum(shares.values())
        if placed < replicas:
            note = shortfall(replicas, shares, rooms, unfit_nodes)
            if placed == 0:
                raise NoPlacement(note)
            return note
        return f"placed {placed} on {layout_text(shares)}" if placed else "no replicas"

    def _tick_of(self, fleet: FleetView) -> _Tick:
        """The tick of this fleet view; a new view is a new tick, with the placements read afresh."""
        if self._tick is None or self._tick.fleet is not fleet:
            self._tick = _Tick(fleet, self.store.layout(), self.pools)
        return self._tick

    def _rooms(self, pool: Pool, tick: _Tick) -> tuple[dict[str, Room], dict[str, str]]:
        """The candidate up nodes with their room for the pool, and why each other up node is none."""
        fleet, layout = tick.fleet, tick.layout
        placed_now = layout.get(pool.name, {})
        rooms, unfit_nodes = {}, {}
        for node in sorted(fleet.up_nodes):
            on, supply = tick.running.get(node, {}), fleet.supply_of(node)
            why = unfit(pool.spec, supply, runs_pool=pool.name in on)
            if why is not None:
                unfit_nodes[node] = why
                continue
            rooms[node] = Room(
                units=fleet.node_replica_slots.get(node, 0),
                taken=units_held(node, on, layout, tick.per_replica, besides=pool.name),
                per_replica=pool.spec.gpus_per_replica,
                mine=placed_now.get(node, on.get(pool.name, 0)),
                gpus=bool(supply.gpu_memory_mib),
            )
        return rooms, unfit_nodes

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        """Put the pools part for every up node on the board (written only when it changed), ending the tick. A
        placement of a pool no longer in the registry (deleted while a tick was placing it) is retired like the
        delete itself. A failover still open closes once its pool's ready replicas are back to what is placed."""
        layout = self._tick_of(fleet).layout
        self._tick = None  # the next apply begins the next tick
        specs = {p.name: p.spec for p in pools}
        for pool in set(layout) - set(specs):
            self.store.retire(pool, now=fleet.now)
        self._close_failovers(fleet, layout)
        retired = self.store.retired()
        done = (retired & set(specs)) | (retired - still_running(fleet, retired))  # created again, or drained
        part = pools_part(fleet, {p: s for p, s in layout.items() if p in specs}, retired - set(specs), specs)
        self.store.forget_retired(done)
        self.board.publish_changed(Part.POOLS, part, now=fleet.now)

    def _close_failovers(self, fleet: FleetView, layout: Layout) -> None:
        ready = fleet.ready_replicas()
        for pool in self.failovers.open_pools():
            if ready.get(pool, 0) >= sum(layout.get(pool, {}).values()):
                self.failovers.ready(pool, now=fleet.now)
