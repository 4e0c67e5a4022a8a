"""``GET /nodes/{id}``: one node's 12 metrics per GPU, pool and the host, live over server-sent events every 500 ms
(``/nodes/{id}/live``, from ``series_latest``), and one chart per metric with a line per GPU (or pool) over the
page's range: the last 15 minutes of raw samples, which the same events extend as they arrive, or 1, 6 or 24 hours
of 1-minute rollups (``web.dashboard.charts``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from collector.registry import NodeView
from collector.series import Point, SeriesKey, SeriesReader
from collector.tables import NO_DEVICE, NO_POOL
from web.auth import ServicesDep
from web.dashboard.absence import gpu_summary, why_absent
from web.dashboard.charts import (
    DEFAULT_RANGE,
    RANGES,
    RAW_SECONDS,
    Line,
    RangeKey,
    TimeRange,
    metric_chart,
    metric_meta,
    table,
    window,
)
from web.dashboard.deps import PageNotFound, Viewer
from web.dashboard.live_stream import event_stream
from web.dashboard.render import page, script_json
from web.dashboard.security import DashboardRoute
from web.dashboard.tiles import SHORT_NAMES
from web.dashboard.units import age, duration, metric_value, reported_by
from web.services import AppServices
from wire.catalog import BY_NAME, METRIC_NAMES, Scope
from wire.control import MetricAbsences

router = APIRouter(route_class=DashboardRoute)
LIVE_INTERVAL_SECONDS = 0.5
# A node's clock may run ahead of the server's: its samples up to a minute "in the future" are drawn, not held back.
CLOCK_AHEAD_SECONDS = 60.0


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


def _stored_key(key: SeriesKey) -> tuple[str, str, tuple[int, str]]:
    """A stored series' DOM key, legend name and place in the legend: GPUs in order, then the host, then pools."""
    _node, device, pool = key
    if device != NO_DEVICE:
        return series_key(device, None), f"GPU {device}", (device, "")
    if pool != NO_POOL:
        return series_key(None, pool), f"pool {pool}", (1 << 30, pool)
    return "host", "host", (1 << 29, "")


def _lines(found: dict[SeriesKey, dict[str, list[Point]]]) -> dict[str, list[Line]]:
    """Per metric, a line per series (GPUs in order, then the host, then pools)."""
    lines: dict[str, list[tuple[tuple[int, str], Line]]] = {}
    for stored, metrics in found.items():
        key, name, order = _stored_key(stored)
        for metric, points in metrics.items():
            lines.setdefault(metric, []).append((order, Line(key, name, points)))
    return {metric: [line for _order, line in sorted(ordered, key=lambda o: o[0])] for metric, ordered in lines.items()}


def _newest(found: dict[SeriesKey, dict[str, list[Point]]]) -> float | None:
    return max((points[-1][0] for metrics in found.values() for points in metrics.values()), default=None)


def _charts(
    services: AppServices, node_id: str, time_range: TimeRange, now: float
) -> tuple[list[dict[str, Any]], float | None]:
    """One chart per metric the node has points of in the range, in catalog order; and the newest point's time
    (None: no point), from which the live updates go on."""
    start = now - time_range.seconds
    series = SeriesReader(services.engine)
    if time_range.live:
        found = series.samples(node_id, start, now + CLOCK_AHEAD_SECONDS)
    else:
        found = series.rollups([node_id], start, now)
    lines = _lines(found)
    return [metric_chart(metric, lines[metric], start) for metric in METRIC_NAMES if metric in lines], _newest(found)


def _new_samples(
    services: AppServices, node_id: str, after: float, now: float
) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """The samples stored since ``after``, per chart as the one table to append, and the newest one's time
    (``after`` when there is none)."""
    found = SeriesReader(services.engine).samples(node_id, after, now + CLOCK_AHEAD_SECONDS)
    tails = {metric: [table(lines, after)] for metric, lines in _lines(found).items()}
    newest = _newest(found)
    return tails, after if newest is None else newest


def _absent(services: AppServices, node_id: str) -> MetricAbsences | None:
    """What the node's agent last said of its missing metrics (None: it said nothing, or sent no report)."""
    report = services.fleet.report(node_id)
    return report.absent if report is not None else None


def _read(services: AppServices, node_id: str) -> NodeView | None:
    return services.fleet.node(node_id, services.clock())


@router.get("/nodes/{node_id}", response_class=HTMLResponse)
def node_detail(
    node_id: str,
    request: Request,
    user: Viewer,
    services: ServicesDep,
    range_: RangeKey = DEFAULT_RANGE,
) -> HTMLResponse:
    view = _read(services, node_id)
    if view is None:
        raise PageNotFound(f"no node {node_id!r}")
    now = services.clock()
    time_range = RANGES[range_]
    charts, newest = _charts(services, node_id, time_range, now)
    absent = _absent(services, node_id)
    rows = _rows(view)
    why = {(row.key, name): why_absent(name, view, absent) for row in rows for name in row.metrics}
    since = newest if newest is not None else now - time_range.seconds
    return page(
        request,
        "node.html",
        user,
        node=view,
        rows=rows,
        gpu_summary=gpu_summary(view, absent),
        why=why,
        live=live_values(view, now),
        reported_by=reported_by(view.source, view.resolution_seconds),
        live_every=duration(view.resolution_seconds) if view.resolution_seconds else "500 ms",
        short=SHORT_NAMES,
        ranges=RANGES.values(),
        time_range=time_range,
        has_history=bool(charts),
        chart_data=script_json(
            {"window": window(time_range, now), "charts": charts, "since": since, "meta": metric_meta()}
        ),
    )


@router.get("/nodes/{node_id}/live")
async def node_live(
    node_id: str,
    request: Request,
    user: Viewer,
    services: ServicesDep,
    events: Annotated[int | None, Query(ge=1, le=100_000, description="stop after this many events")] = None,
    since: Annotated[
        float | None, Query(allow_inf_nan=False, description="also send the raw samples stored after this time")
    ] = None,
) -> StreamingResponse:
    """``text/event-stream``: the node's latest values every 500 ms until the browser goes away or the session
    ends. With ``since`` (the newest sample a live chart holds) each event also carries the samples stored after
    it, per chart as a table to append (``web.dashboard.charts.table``), and ``now``, the server's clock the
    charts' window ends at. ``since`` is clamped to that window (``RAW_SECONDS``): the chart draws nothing older,
    and ``since=0`` read the node's whole history, 88,000 rows an event."""
    if await run_in_threadpool(_read, services, node_id) is None:
        raise PageNotFound(f"no node {node_id!r}")
    after = None if since is None else max(since, services.clock() - RAW_SECONDS)

    def read() -> dict[str, Any] | None:
        nonlocal after
        view = _read(services, node_id)
        if view is None:
            return None
        now = services.clock()
        event = live_values(view, now)
        if after is not None:
            event["charts"], after = _new_samples(services, node_id, after, now)
            event["now"] = now
        return event

    return event_stream(request, services, user, read, interval_s=LIVE_INTERVAL_SECONDS, events=events)
