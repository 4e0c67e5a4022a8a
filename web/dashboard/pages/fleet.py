"""``GET /``: the fleet overview. One page of node tiles (cursor-paginated, so 1,000 nodes are 21 pages of 48),
each coloured by its worst metric, with the 12 metrics as 30-minute sparklines drawn from 1-minute rollups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from collector.catalog import METRIC_NAMES
from collector.registry import NodeStatus, NodeView, reported_pools
from collector.series import recent_node_rollups
from web.auth import ServicesDep
from web.dashboard.deps import Viewer
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.dashboard.tiles import SHORT_NAMES, node_heat, sparkline_points
from web.dashboard.units import metric_value, reported_by

router = APIRouter(route_class=DashboardRoute)
SPARKLINE_SECONDS = 1800.0
DEFAULT_PAGE_SIZE = 48


@dataclass(frozen=True)
class MetricCell:
    name: str
    label: str
    value: str
    points: str  # SVG polyline points; '' when there is no history yet


@dataclass(frozen=True)
class Tile:
    id: str
    status: str
    gpus: int
    heat: str
    hot_metric: str | None
    cells: tuple[MetricCell, ...]
    reported_by: str


def _tile(view: NodeView, history: dict[str, list[tuple[float, float]]], slo: dict[str, float]) -> Tile:
    heat = node_heat(view, slo)
    latest = view.latest
    cells = tuple(
        MetricCell(
            name,
            SHORT_NAMES[name],
            metric_value(name, latest.get(name)),
            sparkline_points([v for _ts, v in history.get(name, [])]),
        )
        for name in METRIC_NAMES
    )
    hot = SHORT_NAMES[heat.worst_metric] if heat.worst_metric else None
    by = reported_by(view.source, view.resolution_seconds)
    return Tile(view.id, view.status.value, len(view.gpus), heat.heat.css, hot, cells, by)


@router.get("/", response_class=HTMLResponse)
def overview(
    request: Request,
    user: Viewer,
    services: ServicesDep,
    pool: Annotated[str | None, Query(max_length=128)] = None,
    status: Annotated[str, Query(pattern="^(up|down)?$", description="up, down or empty for all")] = "",
    after: Annotated[str | None, Query(max_length=128)] = None,
    size: Annotated[int, Query(ge=1, le=200)] = DEFAULT_PAGE_SIZE,
) -> HTMLResponse:
    now = services.clock()
    pool, wanted = pool or None, NodeStatus(status) if status else None
    with services.engine.connect() as conn:
        views = services.fleet.list_nodes(conn, now, after=after, limit=size + 1, status=wanted, pool=pool)
        shown = views[:size]
        history = recent_node_rollups(conn, [v.id for v in shown], now - SPARKLINE_SECONDS, now)
        statuses = services.fleet.statuses(conn, now)
        pools = reported_pools(conn)
    slo = {p.name: p.spec.slo_p99_seconds for p in services.pools.list()}
    tiles = [_tile(v, history.get(v.id, {}), slo) for v in shown]
    up = sum(1 for s in statuses.values() if s is NodeStatus.UP)
    return page(
        request,
        "fleet.html",
        user,
        tiles=tiles,
        pools=sorted(set(pools) | set(slo)),
        pool=pool,
        status=status,
        size=size,
        next_after=shown[-1].id if len(views) > size else None,
        paged=after is not None,
        counts={"total": len(statuses), "up": up, "down": len(statuses) - up},
    )
