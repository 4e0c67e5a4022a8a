"""``GET /nodes/{id}``: one node's 12 metrics per GPU, pool and the host, live over server-sent events every 500 ms
(``/nodes/{id}/live``, from ``series_latest``), with the last hour of 1-minute rollups as charts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from collector.catalog import BY_NAME, METRIC_NAMES, Scope
from collector.registry import NodeView
from collector.series import series_rollups
from web.auth import ServicesDep
from web.dashboard.deps import PageNotFound, Viewer, get_state, session_token
from web.dashboard.render import page, script_json
from web.dashboard.security import DashboardRoute
from web.dashboard.tiles import SHORT_NAMES
from web.dashboard.units import age, duration, metric_value, reported_by
from web.services import AppServices

router = APIRouter(route_class=DashboardRoute)
HISTORY_SECONDS = 3600.0
LIVE_INTERVAL_SECONDS = 0.5
# A stream outlives the request that checked its session: 5 s → one session read per 10 events.
SESSION_RECHECK_SECONDS = 5.0


def series_key(device: int | None, pool: str | None) -> str:
    """The DOM key of a series: ``gpu-0``, ``pool-chat`` or ``host``."""
    if device is not None:
        return f"gpu-{device}"
    return f"pool-{pool}" if pool is not None else "host"


@dataclass(frozen=True)
class SeriesRow:
    key: str
    title: str
    metrics: tuple[str, ...]  # the catalog metrics shown for this kind of series


def _rows(view: NodeView) -> list[SeriesRow]:
    """GPUs (registered or reporting), then the host, then each pool; every row shows its scope's metrics."""
    by_scope = {scope: tuple(n for n in METRIC_NAMES if BY_NAME[n].scope is scope) for scope in Scope}
    devices = sorted({g.index for g in view.gpus} | {s.device for s in view.series if s.device is not None})
    names = {g.index: g.name for g in view.gpus}
    rows = [
        SeriesRow(f"gpu-{d}", f"GPU {d}" + (f" · {names[d]}" if names.get(d) else ""), by_scope[Scope.GPU])
        for d in devices
    ]
    rows.append(SeriesRow("host", "Host", by_scope[Scope.NODE]))
    pools = sorted({s.pool for s in view.series if s.pool is not None})
    rows += [SeriesRow(f"pool-{p}", f"Pool {p}", by_scope[Scope.POOL_REPLICA]) for p in pools]
    return rows


def live_values(view: NodeView, now: float) -> dict[str, Any]:
    """One SSE event: every series' metrics formatted with units (the page only swaps text), status and age."""
    values: dict[str, dict[str, str]] = {}
    for s in view.series:
        values.setdefault(series_key(s.device, s.pool), {}).update(
            {name: metric_value(name, value) for name, value in s.metrics.items()}
        )
    return {
        "status": view.status.value,
        "last_seen": age(now - view.last_seen),
        "values": values,
        "ts": max((s.ts for s in view.series), default=None),
    }


def _history(services: AppServices, node_id: str, now: float) -> dict[str, list[dict[str, Any]]]:
    """Per metric, one chart trace per series: ``{"gpu_power_watts": [{"name": "GPU 0", "x": [...], "y": [...]}]}``."""
    with services.engine.connect() as conn:
        found = series_rollups(conn, [node_id], now - HISTORY_SECONDS, now)
    charts: dict[str, list[dict[str, Any]]] = {}
    for (_node, device, pool), metrics in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        title = f"GPU {device}" if device >= 0 else (f"pool {pool}" if pool else "host")
        for name, points in metrics.items():
            charts.setdefault(name, []).append(
                {"name": title, "x": [p[0] * 1000 for p in points], "y": [p[1] for p in points]}
            )
    return {name: charts[name] for name in METRIC_NAMES if name in charts}  # in catalog order


def _read(services: AppServices, node_id: str) -> NodeView | None:
    with services.engine.connect() as conn:
        return services.fleet.node(conn, node_id, services.clock())


@router.get("/nodes/{node_id}", response_class=HTMLResponse)
def node_detail(node_id: str, request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    view = _read(services, node_id)
    if view is None:
        raise PageNotFound(f"no node {node_id!r}")
    now = services.clock()
    charts = _history(services, node_id, now)
    return page(
        request,
        "node.html",
        user,
        node=view,
        rows=_rows(view),
        live=live_values(view, now),
        reported_by=reported_by(view.source, view.resolution_seconds),
        live_every=duration(view.resolution_seconds) if view.resolution_seconds else "500 ms",
        short=SHORT_NAMES,
        has_history=bool(charts),
        chart_data=script_json(
            {
                "charts": charts,
                "titles": {n: SHORT_NAMES[n] for n in charts},
                "units": {n: BY_NAME[n].unit for n in charts},
            }
        ),
    )


@router.get("/nodes/{node_id}/live")
async def node_live(
    node_id: str,
    request: Request,
    _user: Viewer,
    services: ServicesDep,
    events: Annotated[int | None, Query(ge=1, le=100_000, description="stop after this many events")] = None,
) -> StreamingResponse:
    """``text/event-stream``: the node's latest values every 500 ms until the browser goes away or the session
    ends (re-checked every ``SESSION_RECHECK_SECONDS``: a logout or a revoked token stops the stream within 5 s)."""
    if await run_in_threadpool(_read, services, node_id) is None:
        raise PageNotFound(f"no node {node_id!r}")
    state = get_state(request)

    async def stream() -> AsyncIterator[str]:
        sent, checked_at = 0, services.clock()
        while events is None or sent < events:
            view = await run_in_threadpool(_read, services, node_id)
            if view is not None:
                yield f"data: {json.dumps(live_values(view, services.clock()))}\n\n"
            sent += 1
            if await request.is_disconnected() or (events is not None and sent >= events):
                return
            await asyncio.sleep(LIVE_INTERVAL_SECONDS)
            if services.clock() - checked_at >= SESSION_RECHECK_SECONDS:
                if await run_in_threadpool(session_token, request, state, services) is None:
                    return
                checked_at = services.clock()

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
