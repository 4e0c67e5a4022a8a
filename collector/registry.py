"""The node registry: what each node is, whether it is up, and the latest value of each of its series."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Row, select

from collector.aggregate import combine_series
from collector.catalog import BY_NAME, METRIC_NAMES
from collector.tables import NO_DEVICE, NO_POOL, devices, nodes, series_latest


class NodeStatus(StrEnum):
    UP = "up"
    DOWN = "down"


def node_status(last_seen: float, *, now: float, down_after_seconds: float) -> NodeStatus:
    """Up while the last batch with samples arrived under ``down_after_seconds`` ago (server clock)."""
    return NodeStatus.UP if now - last_seen < down_after_seconds else NodeStatus.DOWN


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    driver_version: str | None


@dataclass(frozen=True)
class LatestSeries:
    node_id: str
    device: int | None
    pool: str | None
    ts: float
    metrics: dict[str, float]
    extra: dict[str, Any] | None


@dataclass(frozen=True)
class NodeView:
    id: str
    status: NodeStatus
    hostname: str | None
    agent_version: str | None
    first_seen: float
    last_seen: float
    last_sample_ts: float | None
    gpus: list[Gpu]
    series: list[LatestSeries] = field(default_factory=list)

    @property
    def latest(self) -> dict[str, float]:
        """One value per metric over the node's series, combined as the catalog says (sum or max)."""
        return combine_latest(self.series)


def combine_latest(series: Iterable[LatestSeries]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for s in series:
        for name, value in s.metrics.items():
            values[name].append(value)
    return {name: combine_series(vs, BY_NAME[name].pool_aggregate) for name, vs in values.items()}


def latest_from_row(row: Row[Any]) -> LatestSeries:
    m = row._mapping
    return LatestSeries(
        node_id=m["node_id"],
        device=None if m["device"] == NO_DEVICE else m["device"],
        pool=None if m["pool"] == NO_POOL else m["pool"],
        ts=m["ts"],
        metrics={name: m[name] for name in METRIC_NAMES if m[name] is not None},
        extra=m["extra"],
    )


def read_latest(
    conn: Connection, node_ids: Sequence[str] | None = None, *, pools_only: bool = False
) -> list[LatestSeries]:
    """The latest value of every series (of ``node_ids``; only pool series with ``pools_only``)."""
    query = select(series_latest).order_by(series_latest.c.node_id, series_latest.c.device, series_latest.c.pool)
    if node_ids is not None:
        query = query.where(series_latest.c.node_id.in_(node_ids))
    if pools_only:
        query = query.where(series_latest.c.pool != NO_POOL)
    return [latest_from_row(r) for r in conn.execute(query)]


def reported_pools(conn: Connection) -> list[str]:
    """Every pool some node reports a series of, by name (the dashboard's pool filter)."""
    query = (
        select(series_latest.c.pool).where(series_latest.c.pool != NO_POOL).distinct().order_by(series_latest.c.pool)
    )
    return list(conn.scalars(query))


def node_statuses(conn: Connection, *, now: float, down_after_seconds: float) -> dict[str, NodeStatus]:
    rows = conn.execute(select(nodes.c.id, nodes.c.last_seen))
    return {r.id: node_status(r.last_seen, now=now, down_after_seconds=down_after_seconds) for r in rows}


def list_nodes(
    conn: Connection,
    *,
    now: float,
    down_after_seconds: float,
    after: str | None = None,
    limit: int = 100,
    status: NodeStatus | None = None,
    pool: str | None = None,
) -> list[NodeView]:
    """Nodes ordered by id, starting after the cursor ``after``; only those of ``status`` or running ``pool``."""
    query = select(nodes).order_by(nodes.c.id).limit(limit)
    if after is not None:
        query = query.where(nodes.c.id > after)
    if status is not None:  # up while now - last_seen < down_after_seconds (node_status)
        fresh = nodes.c.last_seen > now - down_after_seconds
        query = query.where(fresh if status is NodeStatus.UP else ~fresh)
    if pool is not None:
        query = query.where(nodes.c.id.in_(select(series_latest.c.node_id).where(series_latest.c.pool == pool)))
    return _views(conn, conn.execute(query).all(), now=now, down_after_seconds=down_after_seconds)


def get_node(conn: Connection, node_id: str, *, now: float, down_after_seconds: float) -> NodeView | None:
    rows = conn.execute(select(nodes).where(nodes.c.id == node_id)).all()
    views = _views(conn, rows, now=now, down_after_seconds=down_after_seconds)
    return views[0] if views else None


def node_gpus(conn: Connection, node_ids: Sequence[str]) -> dict[str, list[Gpu]]:
    """The GPUs each node registered, by index; a node without GPUs is absent."""
    gpus: dict[str, list[Gpu]] = defaultdict(list)
    for d in conn.execute(select(devices).where(devices.c.node_id.in_(node_ids)).order_by(devices.c.index)):
        g = d._mapping
        gpus[g["node_id"]].append(Gpu(g["index"], g["name"], g["uuid"], g["memory_total_bytes"], g["driver_version"]))
    return dict(gpus)


def _views(conn: Connection, node_rows: Sequence[Row[Any]], *, now: float, down_after_seconds: float) -> list[NodeView]:
    ids = [r.id for r in node_rows]
    if not ids:
        return []
    gpus = node_gpus(conn, ids)
    series: dict[str, list[LatestSeries]] = defaultdict(list)
    for s in read_latest(conn, ids):
        series[s.node_id].append(s)
    return [
        NodeView(
            id=r.id,
            status=node_status(r.last_seen, now=now, down_after_seconds=down_after_seconds),
            hostname=r.hostname,
            agent_version=r.agent_version,
            first_seen=r.first_seen,
            last_seen=r.last_seen,
            last_sample_ts=r.last_sample_ts,
            gpus=gpus.get(r.id, []),
            series=series[r.id],
        )
        for r in node_rows
    ]


@dataclass(frozen=True)
class PoolOnNode:
    """A pool's replicas on one node that is up, and its latest readings there."""

    node_id: str
    pool: str
    ready: int
    starting: int
    ts: float
    metrics: dict[str, float]


def pools_on_up_nodes(conn: Connection, *, now: float, down_after_seconds: float) -> list[PoolOnNode]:
    """Every (node, pool) series of the nodes that are up, with its replica counts (:func:`replica_counts`)."""
    up = {
        n for n, s in node_statuses(conn, now=now, down_after_seconds=down_after_seconds).items() if s is NodeStatus.UP
    }
    found = []
    for s in read_latest(conn, sorted(up), pools_only=True):
        if s.pool is not None:
            ready, starting = replica_counts(s.extra)
            found.append(PoolOnNode(s.node_id, s.pool, ready, starting, s.ts, s.metrics))
    return found


def replica_counts(extra: dict[str, Any] | None) -> tuple[int, int]:
    """(ready, starting) of a node's pool series: the agent's ``replicas_ready``/``replicas_starting`` extras, or one
    ready replica for a series without them (an external vLLM/TGI/Triton is one replica)."""
    extra = extra or {}
    ready, starting = extra.get("replicas_ready", 1), extra.get("replicas_starting", 0)
    return (
        ready if isinstance(ready, int) and ready >= 0 else 1,
        starting if isinstance(starting, int) and starting >= 0 else 0,
    )


def pool_replicas(conn: Connection, *, now: float, down_after_seconds: float) -> dict[str, int]:
    """Ready replicas per pool on the nodes that are up."""
    counts: dict[str, int] = defaultdict(int)
    for p in pools_on_up_nodes(conn, now=now, down_after_seconds=down_after_seconds):
        counts[p.pool] += p.ready
    return dict(counts)
