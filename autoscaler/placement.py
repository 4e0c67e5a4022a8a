"""Where a pool's replicas run, pure: keep what runs, add on the least loaded nodes, remove from the most loaded.

Moves are what cost (a replica takes minutes to warm), so a new placement starts from the current one on the
candidate nodes — nodes that are down are simply not candidates, which is failover: their replicas are placed
again on the others. Additions go one by one to the node with the fewest of the pool's replicas, then the lowest
routing weight, among nodes with a free slot; removals come off the node with the most, then the highest weight.

>>> place(3, [Slot("a", 1, 0.2, 4), Slot("b", 0, 0.9, 4), Slot("c", 0, 0.1, 4)])
{'a': 1, 'b': 1, 'c': 1}
>>> place(1, [Slot("a", 2, 0.2, 4), Slot("b", 1, 0.9, 4)])
{'a': 1, 'b': 0}

Which nodes are candidates at all is :func:`unfit`'s answer (the pool's engine and model offered there, its node
selector matched, GPUs big enough), and how many more replicas one takes is its :class:`Room` (accelerator units
less what the other pools hold); :func:`shortfall` says, per node, why fewer than asked were placed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleet.pools import PoolSpec
from fleet.view import NodeSupply

MAX_LISTED = 6  # nodes one shortfall names per reason; the rest are counted


@dataclass(frozen=True)
class Slot:
    node_id: str
    replicas: int  # the pool's replicas on the node now
    weight: float  # routing weight: lower is better
    free: int  # further replicas the node can take


def place(total: int, slots: Sequence[Slot]) -> dict[str, int]:
    """Replicas per candidate node summing to ``total``, or fewer when the nodes have no room (the caller says so)."""
    if total < 0:
        raise ValueError(f"total: must be >= 0, got {total}")
    counts = {s.node_id: s.replicas for s in slots}
    free = {s.node_id: s.free for s in slots}
    weight = {s.node_id: s.weight for s in slots}
    while sum(counts.values()) > total:
        node = max(counts, key=lambda n: (counts[n], weight[n], n))
        counts[node] -= 1
        free[node] += 1
    while sum(counts.values()) < total:
        open_nodes = [n for n in counts if free[n] > 0]
        if not open_nodes:
            break
        node = min(open_nodes, key=lambda n: (counts[n], weight[n], n))
        counts[node] += 1
        free[node] -= 1
    return counts


def unfit(spec: PoolSpec, supply: NodeSupply, *, runs_pool: bool) -> str | None:
    """Why a node cannot run the pool's replicas at all (short, for the scaling event); None when it can.

    A node that declares no capabilities (an agent older than engine offers) is a candidate only for a pool it
    already runs: its own ``--pools`` keep working, and it is never sent a pool it may not know how to run.
    """
    caps = supply.capabilities
    if caps is None:
        return None if runs_pool else "declares no engines (an older agent) and does not run the pool"
    engine = spec.engine or "text"  # a pool from before engines were named: what a new node runs it as
    offer = caps.engines.get(engine)
    if offer is None and not (spec.engine is None and runs_pool):  # ... or whatever the node runs it as now
        return f"engine {engine!r} not declared"
    if offer is not None and not offer.takes(spec.model):
        return f"engine {engine!r} does not offer model {spec.model!r}"
    missed = {k: v for k, v in spec.node_selector.items() if caps.labels.get(k) != v}
    if missed:
        return "labels " + ",".join(f"{k}={v}" for k, v in missed.items()) + " not matched"
    return None if spec.gpu_memory_mib is None else _gpu_memory_short(spec.gpu_memory_mib, supply)


def _gpu_memory_short(need_mib: int, supply: NodeSupply) -> str | None:
    """Any of the node's GPUs may be the one a replica is given, so the smallest decides (unknown counts as 0)."""
    if not supply.gpu_memory_mib:
        return f"no GPUs (needs {need_mib} MiB each)"
    smallest = min(m or 0 for m in supply.gpu_memory_mib)
    return f"GPUs of {smallest} MiB < {need_mib} MiB" if smallest < need_mib else None


@dataclass(frozen=True)
class Room:
    """A candidate node's accelerator units (its GPUs, or the CPU slots of a GPU-less node) and who holds them:
    4 GPUs, 1 held by another pool, 1 replica of this 1-GPU pool there → 2 more fit."""

    units: int
    taken: int  # units the other pools' replicas hold there
    per_replica: int  # units one replica of this pool takes (gpus_per_replica)
    mine: int  # this pool's replicas there now
    gpus: bool = True  # units are GPUs (else CPU slots): how the event names them

    @property
    def free_units(self) -> int:
        return max(0, self.units - self.taken - self.mine * self.per_replica)

    @property
    def free(self) -> int:
        """Further replicas of this pool the node takes."""
        return self.free_units // self.per_replica

    def after(self, replicas: int) -> Room:
        return Room(self.units, self.taken, self.per_replica, replicas, self.gpus)


def shortfall(asked: int, shares: Mapping[str, int], rooms: Mapping[str, Room], unfit: Mapping[str, str]) -> str:
    """Why only ``sum(shares)`` of ``asked`` replicas were placed, per node: the candidates left without room and
    the nodes that cannot run the pool at all.

    >>> rooms = {"a": Room(2, 0, 2, 0)}
    >>> shortfall(3, {"a": 1}, {"a": rooms["a"]}, {"b": "engine 'vllm' not declared"})
    "placed 1 of 3 on a: 1; no room for 2 on a (0 of 2 GPUs free, 2 per replica); b: engine 'vllm' not declared"
    """
    placed = sum(shares.values())
    head = f"placed {placed} of {asked}" + (f" on {layout_text(shares)}" if placed else "")
    full = [f"{n} ({_free_text(rooms[n].after(shares.get(n, 0)))})" for n in sorted(rooms)]
    parts = [f"no room for {asked - placed} on {', '.join(_listed_items(full))}"] if full else []
    parts += _listed_items([f"{n}: {why}" for n, why in sorted(unfit.items())])
    if not parts:
        parts = ["no node is up"]
    return f"{head}; {'; '.join(parts)}"


def layout_text(shares: Mapping[str, int]) -> str:
    """``a: 2, b: 1``: the nodes holding replicas, by name."""
    return ", ".join(f"{n}: {c}" for n, c in sorted(shares.items()) if c > 0)


def _free_text(room: Room) -> str:
    unit = "GPUs" if room.gpus else "CPU slots"
    each = f", {room.per_replica} per replica" if room.per_replica > 1 else ""
    return f"{room.free_units} of {room.units} {unit} free{each}"


def _listed_items(items: Sequence[str]) -> list[str]:
    more = len(items) - MAX_LISTED
    return [*items[:MAX_LISTED], *([f"{more} more"] if more > 0 else [])]
