"""The fleet read model: one liveness-aware view of the fleet, read once per tick with one
``node_down_after_seconds``, for every room that acts on the fleet (the autoscaler and its actuator, the enforcer,
the forecast loop, alerting, the routing API and the dashboard).

Everything here is a read; the decisions that use it (:mod:`autoscaler.policy`, :mod:`autoscaler.placement`,
:mod:`autoscaler.routing`, :mod:`isolation.noisy`) stay pure. Which node is up is decided here and nowhere else:
:class:`FleetReader` holds the one threshold the composition root gives it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, select

from collector.registry import (
    NodeStatus,
    NodeView,
    PoolOnNode,
    get_node,
    latest_reports,
    list_nodes,
    node_statuses,
    pools_on_nodes,
    pools_on_up_nodes,
    read_latest,
)
from collector.tables import devices
from wire.control import DesiredRefusal, NodeCapabilities, NodeReport


@dataclass(frozen=True)
class NodeLoad:
    node_id: str
    compute_util: float | None  # 0..1: the busiest GPU's utilization
    mem_util: float | None  # 0..1: the fullest GPU's memory in use over its total
    network_latency_s: float | None


@dataclass(frozen=True)
class NodeSupply:
    """What an up node offers placement, from its latest report and its inventory: the engines and labels it declares
    (None: an agent older than engine offers, which runs only its own ``--pools``), its refusal of the latest desired
    state, and each of its GPUs' memory (empty on a GPU-less node; None where the GPU did not say)."""

    capabilities: NodeCapabilities | None = None
    refused: DesiredRefusal | None = None
    gpu_memory_mib: tuple[int | None, ...] = ()


MIB = 1 << 20


@dataclass(frozen=True)
class PoolLive:
    """A pool as the up nodes report it: ready, starting and draining replicas, the summed demand and how old it
    is."""

    ready: int
    starting: int
    demand: float | None
    demand_ts: float | None  # the oldest reading the sum is made of
    draining: int = 0

    @property
    def current(self) -> int:
        """Ready + starting: what a scale decision compares against (docs/architecture.md, glossary)."""
        return self.ready + self.starting


@dataclass(frozen=True)
class FleetView:
    now: float
    statuses: dict[str, NodeStatus]  # every known node, up or down
    up_nodes: frozenset[str]
    pools_on_nodes: tuple[PoolOnNode, ...]  # each (node, pool): replicas and tenant usage reported, latest readings
    node_loads: tuple[NodeLoad, ...]
    node_replica_slots: dict[str, int]  # replicas a node can run in all (its GPUs, or the CPU default)
    supply: dict[str, NodeSupply] = field(default_factory=dict)  # every up node's; a node absent offers nothing known

    def supply_of(self, node_id: str) -> NodeSupply:
        return self.supply.get(node_id, NodeSupply())

    def pool(self, name: str, demand_metric: str) -> PoolLive:
        on = [p for p in self.pools_on_nodes if p.pool == name]
        readings = [(p.metrics[demand_metric], p.ts) for p in on if demand_metric in p.metrics]
        return PoolLive(
            ready=sum(p.ready for p in on),
            starting=sum(p.starting for p in on),
            demand=sum(v for v, _ in readings) if readings else None,
            demand_ts=min(ts for _, ts in readings) if readings else None,
            draining=sum(p.draining for p in on),
        )

    def replicas_on_node(self, node_id: str) -> int:
        """The node's current replicas (ready + starting) over its pools: the slots they hold."""
        return sum(p.current for p in self.pools_on_nodes if p.node_id == node_id)

    def ready_replicas(self) -> dict[str, int]:
        """Ready replicas per pool on the up nodes."""
        ready: dict[str, int] = defaultdict(int)
        for p in self.pools_on_nodes:
            ready[p.pool] += p.ready
        return dict(ready)


def read_fleet(conn: Connection, *, now: float, down_after_seconds: float, cpu_replicas_per_node: int) -> FleetView:
    statuses = node_statuses(conn, now=now, down_after_seconds=down_after_seconds)
    up = frozenset(n for n, s in statuses.items() if s is NodeStatus.UP)
    gpus: dict[str, dict[int, int | None]] = defaultdict(dict)
    for node_id, index, total in conn.execute(select(devices.c.node_id, devices.c.index, devices.c.memory_total_bytes)):
        gpus[node_id][index] = total
    compute: dict[str, list[float]] = defaultdict(list)
    memory: dict[str, list[float]] = defaultdict(list)
    latency: dict[str, float] = {}
    for s in read_latest(conn, sorted(up)):
        if s.device is not None:
            if "gpu_utilization_ratio" in s.metrics:
                compute[s.node_id].append(s.metrics["gpu_utilization_ratio"])
            total = gpus[s.node_id].get(s.device)
            if total and "gpu_memory_used_bytes" in s.metrics:
                memory[s.node_id].append(s.metrics["gpu_memory_used_bytes"] / total)
        elif "network_latency_seconds" in s.metrics:
            latency[s.node_id] = s.metrics["network_latency_seconds"]
    loads = tuple(
        NodeLoad(
            n,
            max(compute[n]) if compute[n] else None,
            min(1.0, max(memory[n])) if memory[n] else None,
            latency.get(n),
        )
        for n in sorted(up)
    )
    slots = {n: len(gpus[n]) if gpus.get(n) else cpu_replicas_per_node for n in up}
    reports = latest_reports(conn, sorted(up))  # read and parsed once, for the pools and for the supply
    return FleetView(
        now,
        statuses,
        up,
        tuple(pools_on_nodes(conn, sorted(up), down_after_seconds=down_after_seconds, reports=reports)),
        loads,
        slots,
        _supply(up, gpus, reports),
    )


def _supply(
    up: frozenset[str], gpus: dict[str, dict[int, int | None]], reports: Mapping[str, NodeReport]
) -> dict[str, NodeSupply]:
    supply = {}
    for node in sorted(up):
        report = reports.get(node)
        memory = tuple(None if b is None else b // MIB for _, b in sorted(gpus.get(node, {}).items()))
        supply[node] = NodeSupply(
            report.capabilities if report is not None else None,
            report.refused if report is not None else None,
            memory,
        )
    return supply


class FleetReader:
    """Reads :class:`FleetView` with the fleet's one liveness threshold; built once by the composition root and
    handed to every loop and route that needs the fleet."""

    def __init__(self, engine: Engine, *, node_down_after_seconds: float, cpu_replicas_per_node: int) -> None:
        if node_down_after_seconds <= 0:
            raise ValueError(f"node_down_after_seconds: must be positive, got {node_down_after_seconds}")
        self.engine = engine
        self.node_down_after_seconds = node_down_after_seconds
        self.cpu_replicas_per_node = cpu_replicas_per_node

    def read(self, now: float) -> FleetView:
        with self.engine.connect() as conn:
            return self.read_with(conn, now)

    def read_with(self, conn: Connection, now: float) -> FleetView:
        """The view inside a connection the caller already holds (a job reading more in the same snapshot)."""
        return read_fleet(
            conn,
            now=now,
            down_after_seconds=self.node_down_after_seconds,
            cpu_replicas_per_node=self.cpu_replicas_per_node,
        )

    def statuses(self, conn: Connection, now: float) -> dict[str, NodeStatus]:
        """Every known node's status alone: the cheap read for a hot path (the /metrics scrape, GET /nodes)."""
        return node_statuses(conn, now=now, down_after_seconds=self.node_down_after_seconds)

    def pools_on_nodes(self, conn: Connection, now: float) -> list[PoolOnNode]:
        """Every (node, pool) of the up nodes alone, without the loads a full view reads."""
        return pools_on_up_nodes(conn, now=now, down_after_seconds=self.node_down_after_seconds)

    def list_nodes(
        self,
        conn: Connection,
        now: float,
        *,
        after: str | None = None,
        limit: int = 100,
        status: NodeStatus | None = None,
        pool: str | None = None,
    ) -> list[NodeView]:
        """A page of nodes with their status (:func:`collector.registry.list_nodes`)."""
        return list_nodes(
            conn,
            now=now,
            down_after_seconds=self.node_down_after_seconds,
            after=after,
            limit=limit,
            status=status,
            pool=pool,
        )

    def node(self, node_id: str, now: float) -> NodeView | None:
        """One node with its status, in a connection of its own (the API's and the dashboard's node)."""
        with self.engine.connect() as conn:
            return get_node(conn, node_id, now=now, down_after_seconds=self.node_down_after_seconds)

    def node_page(self, now: float, *, after: str | None = None, limit: int = 100) -> list[NodeView]:
        """:meth:`list_nodes` in a connection of its own (``GET /api/v1/nodes``)."""
        with self.engine.connect() as conn:
            return self.list_nodes(conn, now, after=after, limit=limit)

    def pools_served(self, now: float) -> list[PoolOnNode]:
        """:meth:`pools_on_nodes` in a connection of its own (the tenants page's usage)."""
        with self.engine.connect() as conn:
            return self.pools_on_nodes(conn, now)

    def pools_of(self, node_id: str) -> set[str]:
        """The pools one node serves, by its series and its latest report, whatever its status."""
        with self.engine.connect() as conn:
            on_node = pools_on_nodes(conn, [node_id], down_after_seconds=self.node_down_after_seconds)
        return {p.pool for p in on_node}

    def report(self, node_id: str) -> NodeReport | None:
        """The node's latest report (None: it sent none, or this release cannot read it)."""
        with self.engine.connect() as conn:
            return latest_reports(conn, [node_id]).get(node_id)
