"""How many pools one node may report (``ingest_max_pools_per_node``), and the batch left once the pools past it are
taken out: their samples and their report entries are refused, the rest of the batch is stored.

10,000 invented pools in 5 pushes grew ``/metrics`` to 1.5 MB and made every ingest answer and alert evaluation slower
for the whole fleet; refusing the whole batch for them instead (422) lost every sample of a node with 65 real pools,
push after push, and its whole spool went to the agent's ``rejected/``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, select

from collector.batch import SampleBatch
from collector.tables import NO_POOL, node_reports, series_latest
from wire.refusals import Refusal, RefusalReason

REFUSED_POOLS_NAMED = 100  # an answer names this many refused pools at most (a batch may invent 20,000)


@dataclass(frozen=True)
class PoolBound:
    """A node reports at most ``max_pools`` distinct pools over the life of its registry entry, not counting the
    pools the control plane configured (``configured``, read only once a batch would pass the bound)."""

    max_pools: int
    configured: Callable[[], Collection[str]]

    def refused(self, reported: Collection[str], batch_pools: Sequence[str]) -> set[str]:
        """The pools of ``batch_pools`` (in order of first appearance) past the bound, given those already
        ``reported``: with 63 reported and a bound of 64, new pools a, b → b is refused."""
        new = [p for p in dict.fromkeys(batch_pools) if p not in reported]
        if len(set(reported)) + len(new) <= self.max_pools:
            return set()
        configured = set(self.configured())
        unknown_new = [p for p in new if p not in configured]
        room = max(0, self.max_pools - len(set(reported) - configured))
        return set(unknown_new[room:])


class PoolsSeen:
    """The pools each node has reported, as this process last read them: a node names the same pools push after push,
    so only a batch naming one not seen here reads the node's series from the database (the read cost the ingest
    bench ~15 % of its rate when every batch made it). Bounded by nodes × ``max_pools``; another server's writes are
    read at this node's next new pool."""

    def __init__(self) -> None:
        self._by_node: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def covers(self, node_id: str, pools: Collection[str]) -> bool:
        with self._lock:
            return set(pools) <= self._by_node.get(node_id, frozenset())

    def note(self, node_id: str, pools: Collection[str]) -> None:
        with self._lock:
            self._by_node[node_id] = frozenset(pools)


def within_pool_bound(
    conn: Connection, batch: SampleBatch, bound: PoolBound, seen: PoolsSeen, in_group: dict[str, set[str]]
) -> tuple[SampleBatch, Refusal | None]:
    """``batch`` without the samples and report entries of the pools past ``bound``, and what was refused (None: the
    batch as it came). The pools of samples and report count alike: a report may name a pool none of whose replicas
    has sent a sample yet (all starting). ``in_group``: the pools the node's batches admitted earlier in the same
    commit named (not in the database yet), updated with this one's."""
    in_report = list(batch.report.pools) if batch.report is not None else []
    named = batch.pools_named() + in_report
    earlier = in_group.setdefault(batch.node_id, set())
    if not named or seen.covers(batch.node_id, named):
        earlier.update(named)
        return batch, None
    reported = _reported_pools(conn, batch.node_id) | earlier
    refused = bound.refused(reported, named)
    kept = set(named) - refused
    # Noted before the commit: should it fail, these pools passed the bound all the same, and the next new pool
    # reads the node's series afresh.
    seen.note(batch.node_id, reported | kept)
    earlier.update(kept)
    if not refused:
        return batch, None
    return _without(batch, refused), _refusal(batch, refused, bound.max_pools)


def _without(batch: SampleBatch, pools: set[str]) -> SampleBatch:
    report = batch.report
    if report is not None:
        report = report.model_copy(update={"pools": {n: p for n, p in report.pools.items() if n not in pools}})
    return batch.take(~_in_pools(batch, pools)).with_report(report)


def _in_pools(batch: SampleBatch, pools: set[str]) -> NDArray[np.bool_]:
    """Which of the batch's samples name one of ``pools``."""
    refused = np.array([name in pools for name in batch.pools] + [False], dtype=bool)
    return refused[batch.pool]  # no pool (-1) picks the trailing False


def _refusal(batch: SampleBatch, pools: set[str], max_pools: int) -> Refusal:
    names = sorted(pools)
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return Refusal(
        reason=RefusalReason.TOO_MANY_POOLS,
        samples=int(_in_pools(batch, pools).sum()),
        detail=f"this node reports more pools than ingest_max_pools_per_node ({max_pools}): {shown} not stored",
        pools=names[:REFUSED_POOLS_NAMED],
    )


def _reported_pools(conn: Connection, node_id: str) -> set[str]:
    """The pools the node has reported: its pool series and the pools of its stored report."""
    c = series_latest.c
    reported = set(conn.scalars(select(c.pool).where(c.node_id == node_id, c.pool != NO_POOL).distinct()))
    stored = conn.scalar(select(node_reports.c.report).where(node_reports.c.node_id == node_id))
    if isinstance(stored, dict) and isinstance(stored.get("pools"), dict):
        reported |= set(stored["pools"])
    return reported
