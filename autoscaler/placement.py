"""Where a pool's replicas run, pure: keep what runs, add on the least loaded nodes, remove from the most loaded.

Moves are what cost (a replica takes minutes to warm), so a new placement starts from the current one on the
candidate nodes — nodes that are down are simply not candidates, which is failover: their replicas are placed
again on the others. Additions go one by one to the node with the fewest of the pool's replicas, then the lowest
routing weight, among nodes with a free slot; removals come off the node with the most, then the highest weight.

>>> place(3, [Slot("a", 1, 0.2, 4), Slot("b", 0, 0.9, 4), Slot("c", 0, 0.1, 4)])
{'a': 1, 'b': 1, 'c': 1}
>>> place(1, [Slot("a", 2, 0.2, 4), Slot("b", 1, 0.9, 4)])
{'a': 1, 'b': 0}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
