"""The fleet page split per pool: each pool's section of node tiles under its summary (the up nodes serving it,
their ready and starting replicas, the worst replica p99 against the pool's SLO, the summed demand).

A node serving two pools shows in both sections; nodes serving none come last, under "no pool". The summary counts
the whole fleet's up nodes, not only the page's: a pool's replicas are the same number on every page.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from collector.registry import PoolOnNode
from fleet.pools import DemandMetric, Pool
from web.dashboard.tiles import SLO_SHARE_THRESHOLDS, Heat, judge
from web.dashboard.units import ABSENT, duration, metric_value, reporters

T = TypeVar("T")
P99 = "request_latency_p99_seconds"


@dataclass(frozen=True)
class PoolSummary:
    """One pool's figures as text; ``p99_heat`` is the worst replica p99 judged against the SLO (unknown without)."""

    nodes: int
    ready: int
    starting: int
    p99: str
    slo: str | None
    p99_heat: str
    demand: str
    demand_metric: str
    configured: bool = True  # False: nodes report it and nobody configured it (it has no page of its own)
    model: str | None = None  # the configured model, else the one its series name

    def live(self) -> dict[str, str]:
        """What the live stream sends of it (the page swaps these texts)."""
        return {
            "nodes": str(self.nodes),
            "ready": str(self.ready),
            "starting": str(self.starting),
            "p99": self.p99,
            "p99_heat": self.p99_heat,
            "demand": self.demand,
        }


def pool_summary(on_nodes: Sequence[PoolOnNode], pool: Pool | None) -> PoolSummary:
    """``on_nodes``: the pool's (node, pool) entries on the up nodes; ``pool``: its configuration, None for a pool
    some node reports and nobody configured (its demand is then counted in requests)."""
    metric = pool.spec.demand_metric.value if pool is not None else DemandMetric.REQUESTS.value
    slo = pool.spec.slo_p99_seconds if pool is not None else None
    p99s = [p.metrics[P99] for p in on_nodes if P99 in p.metrics]
    demands = [p.metrics[metric] for p in on_nodes if metric in p.metrics]
    worst = max(p99s) if p99s else None
    heat = judge(worst / slo, *SLO_SHARE_THRESHOLDS) if worst is not None and slo else Heat.UNKNOWN
    return PoolSummary(
        nodes=len({p.node_id for p in on_nodes}),
        ready=sum(p.ready for p in on_nodes),
        starting=sum(p.starting for p in on_nodes),
        p99=metric_value(P99, worst),
        slo=duration(slo) if slo else None,
        p99_heat=heat.css,
        demand=metric_value(metric, sum(demands)) if demands else ABSENT,
        demand_metric=metric,
        configured=pool is not None,
        model=(pool.spec.model if pool is not None else None) or next((p.model for p in on_nodes if p.model), None),
    )


@dataclass(frozen=True)
class UnconfiguredPool:
    """A pool some up node serves and nobody configured: who reports it ("agents", "Prometheus remote write") and
    the model its series name, so an admin can configure it by that name."""

    name: str
    reported_by: str
    model: str | None
    ready: int = 0  # replicas the up nodes report ready
    p99_seconds: float | None = None  # the worst replica p99 they report (None: not measured)

    @property
    def suggested_slo_seconds(self) -> float:
        """A latency SLO to adopt it with: 1.5 × the worst p99 seen now, at least 1 s, to 2 significant digits
        (3.2 s seen → 4.8 s), so a capacity can be learned from what it serves today; the admin edits it later."""
        if self.p99_seconds is None:
            return 1.0
        return max(1.0, float(f"{1.5 * self.p99_seconds:.2g}"))


def unconfigured_pools(
    on_nodes: Sequence[PoolOnNode], configured: Collection[str], sources: Mapping[str, str]
) -> list[UnconfiguredPool]:
    """The pools of ``on_nodes`` not in ``configured``, by name; ``sources``: each node's ``nodes.source``."""
    found: dict[str, list[PoolOnNode]] = {}
    for p in on_nodes:
        if p.pool not in configured:
            found.setdefault(p.pool, []).append(p)
    out = []
    for name, on in sorted(found.items()):
        p99s = [p.metrics[P99] for p in on if P99 in p.metrics]
        out.append(
            UnconfiguredPool(
                name,
                reporters(sources.get(p.node_id, "agent") for p in on),
                next((p.model for p in on if p.model), None),
                sum(p.ready for p in on),
                max(p99s) if p99s else None,
            )
        )
    return out


@dataclass(frozen=True)
class PoolGroup(Generic[T]):
    pool: str | None  # None: the nodes serving no pool
    summary: PoolSummary | None
    tiles: tuple[T, ...]


def group_by_pool(
    tiles: Sequence[tuple[str | None, T]],
    summaries: Mapping[str, PoolSummary],
    *,
    only: str | None = None,
) -> list[PoolGroup[T]]:
    """``tiles`` (the pool whose section each is in, None for a node serving none; a node in two pools has a tile
    in each) in sections by pool name, "no pool" last; with ``only`` (the page's pool filter) that one section."""
    if only is not None:
        return [PoolGroup(only, summaries.get(only), tuple(t for _, t in tiles))] if tiles else []
    sections: dict[str | None, list[T]] = {}
    for pool, tile in tiles:
        sections.setdefault(pool, []).append(tile)
    named = sorted(pool for pool in sections if pool is not None)
    groups = [PoolGroup(pool, summaries.get(pool), tuple(sections[pool])) for pool in named]
    return groups + ([PoolGroup(None, None, tuple(sections[None]))] if None in sections else [])
