"""The node registry: what each node is, whether it is up, the latest value of each of its series and its latest
report (its replicas and their tenants' usage)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Row, func, or_, select

from collector.aggregate import combine_series
from collector.tables import NO_DEVICE, NO_POOL, devices, node_reports, nodes, series_latest
from wire.catalog import BY_NAME, METRIC_NAMES
from wire.control import NodeReport, TenantUsage

log = logging.getLogger(__name__)


class NodeStatus(StrEnum):
    UP = "up"
    DOWN = "down"


# A scraped node (remote write, OTLP) is up while its last samples are under this many of its scrape intervals old
SCRAPES_BEFORE_DOWN = 3


def node_status(
    last_seen: float, *, now: float, down_after_seconds: float, resolution_seconds: float | None = None
) -> NodeStatus:
    """Up while the last batch with samples arrived under ``down_after_seconds`` ago (server clock), or, for a node
    whose samples come scraped every ``resolution_seconds``, under ``SCRAPES_BEFORE_DOWN`` of those.

    Worked: down_after 3 s; an agent's node last seen 4 s ago is down; a node scraped every 15 s, 40 s ago, is up.
    """
    allowed = max(down_after_seconds, SCRAPES_BEFORE_DOWN * (resolution_seconds or 0.0))
    return NodeStatus.UP if now - last_seen < allowed else NodeStatus.DOWN


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
    source: str = "agent"  # or "remote_write", "otlp": a team's Prometheus or OpenTelemetry collector sends it
    resolution_seconds: float | None = None  # between its samples when scraped; None: an agent's 0.5 s

    @property
    def latest(self) -> dict[str, float]:
        """One value per metric over the node's series, combined as the catalog says (sum or max)."""
        return combine_latest(self.series)


def combine_latest(series: Iterable[LatestSeries]) -> dict[str, float]:
    """Only each GPU's newest series counts: a GPU's rows change series (its pool) when a pod starts or stops using
    it (agent --kubernetes-pods), and the one left behind would count its memory twice."""
    values: dict[str, list[float]] = defaultdict(list)
    for s in _newest_per_gpu(series):
        for name, value in s.metrics.items():
            values[name].append(value)
    return {name: combine_series(vs, BY_NAME[name].pool_aggregate) for name, vs in values.items()}


def _newest_per_gpu(series: Iterable[LatestSeries]) -> list[LatestSeries]:
    newest: dict[tuple[str, int], LatestSeries] = {}
    others: list[LatestSeries] = []
    for s in series:
        if s.device is None:
            others.append(s)
        elif (kept := newest.get((s.node_id, s.device))) is None or s.ts > kept.ts:
            newest[(s.node_id, s.device)] = s
    return others + list(newest.values())


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
    conn: Connection,
    node_ids: Sequence[str] | None = None,
    *,
    pools_only: bool = False,
    written_since: float | None = None,
) -> list[LatestSeries]:
    """The latest value of every series (of ``node_ids``; only pool series with ``pools_only``; only those written
    since ``written_since`` by the server's clock)."""
    query = select(series_latest).order_by(series_latest.c.node_id, series_latest.c.device, series_latest.c.pool)
    if written_since is not None:
        query = query.where(series_latest.c.updated_at >= written_since)
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


def node_sources(conn: Connection, node_ids: Sequence[str]) -> dict[str, str]:
    """Who reports each of ``node_ids`` that is known: ``agent``, ``remote_write`` or ``otlp``."""
    found: dict[str, str] = {}
    for chunk in range(0, len(node_ids), 2000):
        query = select(nodes.c.id, nodes.c.source).where(nodes.c.id.in_(node_ids[chunk : chunk + 2000]))
        found.update({node: source for node, source in conn.execute(query)})
    return found


def node_statuses(conn: Connection, *, now: float, down_after_seconds: float) -> dict[str, NodeStatus]:
    rows = conn.execute(select(nodes.c.id, nodes.c.last_seen, nodes.c.resolution_seconds))
    return {
        r.id: node_status(
            r.last_seen, now=now, down_after_seconds=down_after_seconds, resolution_seconds=r.resolution_seconds
        )
        for r in rows
    }


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
    if status is not None:  # as node_status
        scraped = nodes.c.last_seen > now - SCRAPES_BEFORE_DOWN * nodes.c.resolution_seconds
        fresh = or_(nodes.c.last_seen > now - down_after_seconds, func.coalesce(scraped, False))
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
            status=node_status(
                r.last_seen, now=now, down_after_seconds=down_after_seconds, resolution_seconds=r.resolution_seconds
            ),
            hostname=r.hostname,
            agent_version=r.agent_version,
            first_seen=r.first_seen,
            last_seen=r.last_seen,
            last_sample_ts=r.last_sample_ts,
            gpus=gpus.get(r.id, []),
            series=series[r.id],
            source=r.source,
            resolution_seconds=r.resolution_seconds,
        )
        for r in node_rows
    ]


@dataclass(frozen=True)
class PoolOnNode:
    """A pool's replicas on one node that is up, as the node's latest report says, and its latest readings there
    (``metrics`` empty while no replica has sent any: all of them starting)."""

    node_id: str
    pool: str
    ready: int
    starting: int
    ts: float  # the readings' time; the report's for a pool with none yet
    metrics: dict[str, float]
    draining: int = 0
    consecutive_crashes: int = 0
    startup_seconds: float | None = None
    tenants: Mapping[str, TenantUsage] = field(default_factory=dict)  # each tenant's use of the node's replicas
    model: str | None = None  # the model its series say they serve (remote write's ``extra.model``); None: unsaid

    @property
    def current(self) -> int:
        """Ready + starting (docs/architecture.md, glossary)."""
        return self.ready + self.starting


def pools_on_up_nodes(conn: Connection, *, now: float, down_after_seconds: float) -> list[PoolOnNode]:
    """Every pool on the nodes that are up (:func:`pools_on_nodes`)."""
    up = [
        n for n, s in node_statuses(conn, now=now, down_after_seconds=down_after_seconds).items() if s is NodeStatus.UP
    ]
    return pools_on_nodes(conn, sorted(up), down_after_seconds=down_after_seconds)


def pools_on_nodes(
    conn: Connection,
    node_ids: Sequence[str],
    *,
    down_after_seconds: float,
    reports: Mapping[str, NodeReport] | None = None,
) -> list[PoolOnNode]:
    """Each (node, pool) of ``node_ids`` that has a pool series or an entry in the node's latest report, by node
    and pool: replica counts and tenant usage from the report, readings from the series.

    A series the report does not name (or of a node without a report) is one ready replica: an external
    vLLM/TGI/Triton is one. Unless it stopped ``down_after_seconds`` before the report: that pool left the node
    (series are kept however old), and counting it would place replicas by a pool that is gone. ``reports``: the
    nodes' latest reports when the caller read them already (:func:`latest_reports`), so they are parsed once."""
    if reports is None:
        reports = latest_reports(conn, node_ids)
    # a GPU row may name the pool of the pod using it (agent --kubernetes-pods): not a replica's series
    series = {
        (s.node_id, s.pool): s
        for s in read_latest(conn, node_ids, pools_only=True)
        if s.pool is not None and s.device is None
    }
    keys = set(series) | {(node, pool) for node, report in reports.items() for pool in report.pools}
    found = []
    for node, pool in sorted(keys):
        reading, report = series.get((node, pool)), reports.get(node)
        entry = report.pools.get(pool) if report is not None else None
        if (
            entry is None
            and report is not None
            and reading is not None
            and reading.ts <= report.ts - down_after_seconds
        ):
            continue
        ts = reading.ts if reading is not None else report.ts if report is not None else 0.0
        metrics = reading.metrics if reading is not None else {}
        model = _model_of(reading)
        if entry is None:
            found.append(PoolOnNode(node, pool, 1, 0, ts, metrics, model=model))
        else:
            found.append(
                PoolOnNode(
                    node,
                    pool,
                    entry.ready,
                    entry.starting,
                    ts,
                    metrics,
                    draining=entry.draining,
                    consecutive_crashes=entry.consecutive_crashes,
                    startup_seconds=entry.startup_seconds,
                    tenants=entry.tenants,
                    model=model,
                )
            )
    return found


def _model_of(reading: LatestSeries | None) -> str | None:
    model = (reading.extra or {}).get("model") if reading is not None else None
    return model if isinstance(model, str) else None


def latest_reports(conn: Connection, node_ids: Sequence[str]) -> dict[str, NodeReport]:
    """The latest report of each of ``node_ids`` that sent one, in one query. A stored report this release cannot
    read (written by a newer one) is left out with a log line: that node's pools count as unreported."""
    if not node_ids:
        return {}
    query = select(node_reports.c.node_id, node_reports.c.report).where(node_reports.c.node_id.in_(list(node_ids)))
    reports = {}
    for node_id, body in conn.execute(query):
        try:
            reports[node_id] = NodeReport.model_validate(body)
        except ValidationError as exc:
            log.warning("node %s: its stored report is unreadable, left out: %s", node_id, exc)
    return reports


def pool_replicas(conn: Connection, *, now: float, down_after_seconds: float) -> dict[str, int]:
    """Ready replicas per pool on the nodes that are up."""
    counts: dict[str, int] = defaultdict(int)
    for p in pools_on_up_nodes(conn, now=now, down_after_seconds=down_after_seconds):
        counts[p.pool] += p.ready
    return dict(counts)
