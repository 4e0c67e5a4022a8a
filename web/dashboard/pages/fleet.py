"""``GET /``: the fleet overview. One page of node tiles (cursor-paginated, so 1,000 nodes are 21 pages of 48) in
sections per pool, each tile coloured by its worst metric or its worst firing alert, saying why a value is missing,
with the 12 metrics as 30-minute sparklines drawn from 1-minute rollups. ``GET /fleet/live`` streams the same page's
tiles every 2 s, only those that changed, so the page updates without a reload."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import Alert, AlertStatus
from alerting.silences import silenced
from collector.registry import NodeStatus, NodeView, PoolOnNode, latest_reports, pools_on_nodes, reported_pools
from collector.series import recent_section_rollups
from fleet.pools import Pool
from web.auth import ServicesDep
from web.dashboard.absence import gpu_reason, gpu_reasons, gpu_summary, why_absent
from web.dashboard.deps import Viewer
from web.dashboard.live_stream import event_stream
from web.dashboard.pool_groups import PoolGroup, PoolSummary, group_by_pool, pool_summary
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.dashboard.tiles import SHORT_NAMES, AlertMark, aggregate_label, alert_marks, node_heat, sparkline_points
from web.dashboard.units import metric_value, reported_by
from web.services import AppServices
from wire.catalog import METRIC_NAMES
from wire.control import MetricAbsences

router = APIRouter(route_class=DashboardRoute)
SPARKLINE_SECONDS = 1800.0
DEFAULT_PAGE_SIZE = 48
LIVE_INTERVAL_SECONDS = 2.0
# The pool summaries read every up node's report: with 1,000 nodes a live event costs ~0.1 s with them and ~0.04 s
# without (2 cores, SQLite).
POOL_SUMMARY_SECONDS = 10.0
# Firing alerts read per page: 20 rules firing on every one of 1,000 nodes is 20,000; more than that is one storm.
MAX_FIRING_READ = 20_000


@dataclass(frozen=True)
class PageQuery:
    """The page's filter and cursor, the same for the page and its live stream."""

    pool: str | None
    status: str  # "up", "down" or "" for both
    after: str | None
    size: int

    @property
    def wanted(self) -> NodeStatus | None:
        return NodeStatus(self.status) if self.status else None


def page_query(
    pool: Annotated[str | None, Query(max_length=128)] = None,
    status: Annotated[str, Query(pattern="^(up|down)?$", description="up, down or empty for all")] = "",
    after: Annotated[str | None, Query(max_length=128)] = None,
    size: Annotated[int, Query(ge=1, le=200)] = DEFAULT_PAGE_SIZE,
) -> PageQuery:
    return PageQuery(pool or None, status, after, size)


PageQueryDep = Annotated[PageQuery, Depends(page_query)]


@dataclass(frozen=True)
class MetricCell:
    name: str
    label: str
    value: str
    why: str  # why the value is absent; '' when there is one
    points: str  # SVG polyline points; '' when there is no history yet
    aggregate: tuple[str, str] = ("", "")  # how the node's series combine: ("max", "the highest of the node's GPUs")


@dataclass(frozen=True)
class Tile:
    id: str
    key: str  # the node, or "node/pool" for its tile in that pool's section (the live updates find it by this)
    status: str
    gpus: str  # "2 GPUs", or why there are none: "no GPU (NVML Shared Library Not Found)"
    heat: str
    hot_metric: str | None
    cells: tuple[MetricCell, ...]
    reported_by: str
    alert: AlertMark | None

    def live(self) -> dict[str, Any]:
        """What the live stream sends of the tile: every text the page swaps, and the classes it sets."""
        return {
            "status": self.status,
            "heat": self.heat,
            "alert": self.alert.severity if self.alert is not None else None,
            "mark": self.alert.text if self.alert is not None else "",
            "gpus": self.gpus,
            "hot": self.hot_metric or "",
            "values": {c.name: c.value for c in self.cells},
            "why": {c.name: c.why for c in self.cells},
        }


def scoped(view: NodeView, pool: str) -> NodeView:
    """The node as ``pool``'s section shows it: its GPUs and host, and that pool's replicas only (a node serving
    chat and vision shows chat's p99 under chat, vision's under vision)."""
    return replace(view, series=[s for s in view.series if s.device is not None or s.pool in (None, pool)])


def build_tile(
    view: NodeView,
    key: str,
    history: Mapping[str, list[tuple[float, float]]],
    slo: Mapping[str, float],
    absent: MetricAbsences | None,
    alert: AlertMark | None,
) -> Tile:
    """A firing alert's severity colours the tile when it is worse than the metrics (a critical alert is red)."""
    heat = node_heat(view, slo)
    shown = max(heat.heat, alert.heat) if alert is not None else heat.heat
    latest = view.latest
    cells = tuple(
        MetricCell(
            name,
            SHORT_NAMES[name],
            metric_value(name, latest.get(name)),
            "" if name in latest else why_absent(name, view, absent, with_reason=False),
            sparkline_points([v for _ts, v in history.get(name, [])]),
            aggregate_label(name),
        )
        for name in METRIC_NAMES
    )
    hot = SHORT_NAMES[heat.worst_metric] if heat.worst_metric else None
    by = reported_by(view.source, view.resolution_seconds)
    gpus = gpu_summary(view, absent, with_reason=False)  # the agents' reasons: once for the page (gpu_reasons)
    return Tile(view.id, key, view.status.value, gpus, shown.css, hot, cells, by, alert)


@dataclass(frozen=True)
class FleetPage:
    tiles: list[Tile]
    groups: list[PoolGroup[Tile]]
    summaries: dict[str, PoolSummary]
    counts: dict[str, int]
    next_after: str | None
    pools: list[str]  # every pool, for the filter
    gpu_reasons: list[tuple[str, int]] = field(default_factory=list)  # why the page's nodes read no GPU, and how many


def read_page(services: AppServices, query: PageQuery, *, sparklines: bool, summaries: bool) -> FleetPage:
    """The page's nodes with their reports, the pools they serve and the alerts firing on them; ``sparklines``: the
    rollups behind each cell; ``summaries``: the summaries of their pools over the whole fleet (of 1,000 nodes the
    bulk of the cost: every up node's report is read)."""
    now = services.clock()
    with services.engine.connect() as conn:
        views = services.fleet.list_nodes(
            conn, now, after=query.after, limit=query.size + 1, status=query.wanted, pool=query.pool
        )
        shown = views[: query.size]
        ids = [v.id for v in shown]
        reports = latest_reports(conn, ids)
        pools_of: dict[str, list[str]] = {}
        for p in pools_on_nodes(conn, ids, down_after_seconds=services.fleet.node_down_after_seconds, reports=reports):
            pools_of.setdefault(p.node_id, []).append(p.pool)
        # each node's sections: the page's pool, else every pool it serves, else none (None: the whole node)
        sections: dict[str, list[str | None]] = {
            v.id: [query.pool] if query.pool else list(pools_of.get(v.id, [])) or [None] for v in shown
        }
        start = now - SPARKLINE_SECONDS
        history = recent_section_rollups(conn, sections, start, now) if sparklines else {}
        statuses = services.fleet.statuses(conn, now)
        on_up_nodes = services.fleet.pools_on_nodes(conn, now) if summaries else []
        known = reported_pools(conn)
    configured = {p.name: p for p in services.pools.list()}
    slo = {name: p.spec.slo_p99_seconds for name, p in configured.items()}
    marks = _section_marks(_firing(services, now), sections)
    absences = {v.id: reports[v.id].absent if v.id in reports else None for v in shown}
    entries: list[tuple[str | None, Tile]] = []
    for v in shown:
        absent = absences[v.id]
        for pool in sections[v.id]:
            view, key = (v, v.id) if pool is None else (scoped(v, pool), f"{v.id}/{pool}")
            mark = marks.get((v.id, pool))
            entries.append((pool, build_tile(view, key, history.get((v.id, pool), {}), slo, absent, mark)))
    tiles = [tile for _pool, tile in entries]
    named = {p for pools in pools_of.values() for p in pools} | ({query.pool} if query.pool else set())
    found = _summaries(on_up_nodes, sorted(named), configured) if summaries else {}
    up = sum(1 for s in statuses.values() if s is NodeStatus.UP)
    return FleetPage(
        tiles=tiles,
        groups=group_by_pool(entries, found, only=query.pool),
        summaries=found,
        counts={"total": len(statuses), "up": up, "down": len(statuses) - up},
        next_after=shown[-1].id if len(views) > query.size else None,
        pools=sorted(set(known) | set(configured)),
        gpu_reasons=gpu_reasons({v.id: gpu_reason(v, absences[v.id]) for v in shown}),
    )


def _summaries(
    on_up_nodes: Sequence[PoolOnNode], names: Sequence[str], configured: Mapping[str, Pool]
) -> dict[str, PoolSummary]:
    by_pool: dict[str, list[PoolOnNode]] = {name: [] for name in names}
    for p in on_up_nodes:
        if p.pool in by_pool:
            by_pool[p.pool].append(p)
    return {name: pool_summary(on, configured.get(name)) for name, on in by_pool.items()}


def _section_marks(
    firing: Sequence[Alert], sections: Mapping[str, Sequence[str | None]]
) -> dict[tuple[str, str | None], AlertMark]:
    """Each tile's mark: in a pool's section the alerts on the node or that pool (another pool's stay in its own
    section); a node serving no pool, every alert on it."""
    unpooled = [a for a in firing if "pool" not in a.labels]
    by_pool: dict[str, list[Alert]] = {}
    for a in firing:
        if "pool" in a.labels:
            by_pool.setdefault(a.labels["pool"], []).append(a)
    marks: dict[tuple[str, str | None], AlertMark] = {}
    for pool in {p for pools in sections.values() for p in pools}:
        nodes = {node: [pool] if pool is not None else [] for node, pools in sections.items() if pool in pools}
        found = alert_marks(firing if pool is None else unpooled + by_pool.get(pool, []), nodes)
        marks.update({(node, pool): mark for node, mark in found.items()})
    return marks


def _firing(services: AppServices, now: float) -> list[Alert]:
    """Firing alerts that no silence covers (a silenced one is an operator's known problem, not a new mark)."""
    active = SilenceStore(services.engine).list(active_at=now)
    firing = AlertStore(services.engine).list(status=AlertStatus.FIRING.value, limit=MAX_FIRING_READ)
    return [a for a in firing if not silenced(a.labels, active, now)]


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, user: Viewer, services: ServicesDep, query: PageQueryDep) -> HTMLResponse:
    found = read_page(services, query, sparklines=True, summaries=True)
    return page(
        request,
        "fleet.html",
        user,
        tiles=found.tiles,
        groups=found.groups,
        pools=found.pools,
        pool=query.pool,
        status=query.status,
        size=query.size,
        after=query.after,
        next_after=found.next_after,
        paged=query.after is not None,
        counts=found.counts,
        gpu_reasons=found.gpu_reasons,
    )


class LiveChanges:
    """One live stream's events: what it sent last, so that each event carries only the tiles and pool summaries
    that changed (the first, all of them); the summaries are read again every ``POOL_SUMMARY_SECONDS``."""

    def __init__(self, services: AppServices, query: PageQuery) -> None:
        self.services = services
        self.query = query
        self.tiles: dict[str, dict[str, Any]] = {}
        self.pools: dict[str, dict[str, str]] = {}
        self.summed_at = float("-inf")

    def __call__(self) -> dict[str, Any]:
        now = self.services.clock()
        summaries = now - self.summed_at >= POOL_SUMMARY_SECONDS
        found = read_page(self.services, self.query, sparklines=False, summaries=summaries)
        if summaries:
            self.summed_at = now
        tiles = {t.key: t.live() for t in found.tiles}
        pools = {name: s.live() for name, s in found.summaries.items()}
        changed = {node: v for node, v in tiles.items() if self.tiles.get(node) != v}
        moved = {name: v for name, v in pools.items() if self.pools.get(name) != v}
        self.tiles.update(changed)
        self.pools.update(moved)
        return {"tiles": changed, "pools": moved, "counts": found.counts, "ts": now}


@router.get("/fleet/live")
async def fleet_live(
    request: Request,
    user: Viewer,
    services: ServicesDep,
    query: PageQueryDep,
    events: Annotated[int | None, Query(ge=1, le=100_000, description="stop after this many events")] = None,
) -> StreamingResponse:
    """``text/event-stream``: every 2 s, the tiles of the page ``query`` names that changed since the last event (all
    of them in the first) and the fleet's counts; every 10 s, the pool summaries that changed."""
    changes = LiveChanges(services, query)
    return event_stream(request, services, user, changes, interval_s=LIVE_INTERVAL_SECONDS, events=events)
