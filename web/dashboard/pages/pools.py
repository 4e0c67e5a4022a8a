"""``GET /pools`` and ``/pools/{name}``: replicas (ready, running, desired) over time, demand against capacity with
the forecast's 90 % band and the predicted saturation, the scaling events with their reasons; operators scale by
hand and switch dry-run through the REST API's own functions, so each change is checked, refused and audited as the
API does it."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.datastructures import FormData

from autoscaler.policy.decision import ForecastView
from collector.registry import node_sources, reported_pools
from collector.series import Point, SeriesQuery, SeriesReader
from fleet.pools import Pool
from predictor.accuracy import distrusted
from predictor.capacity import replica_capacity
from predictor.store import GoodForecast, StoredForecast, SubjectKind
from web.auth import ServicesDep
from web.changes.audit import AuditorDep
from web.changes.pools import apply_pool_patch, apply_pool_scale
from web.dashboard.charts import CHART_TITLES, DEFAULT_RANGE, RANGES, Line, RangeKey, TimeRange, chart, table, window
from web.dashboard.deps import (
    CsrfForm,
    DashboardUser,
    Operator,
    PageNotFound,
    Viewer,
    field,
    posted_version,
    validation_problem,
)
from web.dashboard.live_stream import event_stream
from web.dashboard.pool_groups import unconfigured_pools
from web.dashboard.render import page, script_json
from web.dashboard.security import DashboardRoute
from web.errors import ApiError
from web.schemas.pools import PoolPatch, ScaleIn
from web.services import AppServices
from wire.catalog import BY_NAME

router = APIRouter(route_class=DashboardRoute)
FORECAST_AHEAD_SECONDS = 900.0  # the charts' window runs on past now by the forecast's 15 minutes
LIVE_INTERVAL_SECONDS = 1.0  # a live pool page's update: its demand is in 1 s buckets
TAIL_SECONDS = 30.0  # each update redraws its charts' last 30 s (a bucket still filling, a late report)
MIN_REPLICA_STEP_SECONDS = 5.0
DONE = {
    "scaled": "Manual scale recorded: the controller applies it at its next decision.",
    "mode": "Mode changed.",
    "adopted": "Adopted in dry run: the autoscaler decides and records what it would do here, and applies nothing "
    "until the pool is switched to act.",
}


def _desired(services: AppServices, pool: Pool, start: float, now: float) -> list[Point]:
    """The desired count as a step line over [start, now], never before the pool was created (there was no desired
    count then): what it was at the line's start, each decision's, and now's."""
    start = max(start, pool.created_at)
    decided = [e for e in services.events.list(pool=pool.name, limit=500) if e.ts >= start]
    decided.reverse()  # oldest first
    points = [(start, float(decided[0].from_replicas))] if decided and decided[0].ts > start else []
    points += [(e.ts, float(e.to_replicas)) for e in decided]
    if pool.desired_replicas is not None:
        points.append((now, float(pool.desired_replicas)))
    return points


def _pool_charts(
    services: AppServices, pool: Pool, forecast: StoredForecast | None, time_range: TimeRange, now: float, start: float
) -> list[dict[str, Any]]:
    """The pool's two charts over [start, now] (the page's range; a live update's last ``TAIL_SECONDS``):
    replicas (running, ready, desired) and demand against capacity with the forecast's band. A live update
    appends the history tables' tails and replaces the others (desired, the forecast, its limit) whole, so those
    always span the page's range."""
    origin = now - time_range.seconds
    step = time_range.step
    metric = pool.spec.demand_metric.value
    points, history = SeriesReader(services.engine).pool_history(
        SeriesQuery(metric, start, now, pool=pool.name, step=step),
        pool.name,
        raw_max_seconds=services.settings.raw_query_max_seconds,
        replica_step=max(step, MIN_REPLICA_STEP_SECONDS),
    )
    ready = [(t, float(r)) for t, r, _s in history]
    running = Line("running", "running (ready + starting)", [(t, float(r + s)) for t, r, s in history], "step")
    ready_line = Line("ready", "ready", ready, "step")
    desired = Line("desired", "desired", _desired(services, pool, origin, now), "step-dash")
    replicas = chart(
        "replicas",
        "Replicas",
        "replicas",
        [table([running, ready_line], origin), table([desired], origin, merge=False)],
        [running, ready_line, desired],
    )
    actual = Line("demand", "demand", points)
    tables, lines = [table([actual], origin)], [actual]
    capacity = per_replica_capacity(pool, forecast)
    if capacity is not None:
        carried = Line("capacity", "capacity (ready × per replica)", [(t, r * capacity) for t, r in ready], "step")
        tables.append(table([carried], origin))
        lines.append(carried)
    good = forecast.good if forecast is not None else None
    if good is not None and good.points:
        floor = BY_NAME[metric].minimum  # no demand below 0: the band is drawn from there
        band = [
            Line("hi", "90 % band, high", [(p.ts, max(p.hi, floor)) for p in good.points], "band"),
            Line("lo", "90 % band, low", [(p.ts, max(p.lo, floor)) for p in good.points], "band"),
            Line("forecast", "forecast", [(p.ts, max(p.yhat, floor)) for p in good.points], "dash"),
        ]
        level = pool.spec.slo_attainment
        sized = [(ts, max(value, floor)) for ts, value in target_quantile(good, level)]
        band.append(Line("sized", f"{level:.1%} quantile (what the policy sizes for)", sized, "dash"))
        tables.append(table(band, origin, merge=False))
        lines += band
        limit = (good.saturation or {}).get("capacity")
        if isinstance(limit, int | float):
            ends = [(good.points[0].ts, float(limit)), (good.points[-1].ts, float(limit))]
            ahead = Line("limit", "capacity ahead", ends, "limit")
            tables.append(table([ahead], origin, merge=False))
            lines.append(ahead)
    title = f"{CHART_TITLES[metric]}: demand against capacity, with the 15-min forecast"
    demand = chart("demand", title, BY_NAME[metric].unit, tables, lines)
    return [replicas, demand]


def target_quantile(good: GoodForecast, level: float) -> list[tuple[float, float]]:
    """The forecast's quantile at ``level`` per point: the forecaster's own, else read from its band."""
    view = ForecastView(
        good.origin_ts,
        tuple((p.ts, p.yhat, p.lo, p.hi) for p in good.points),
        levels=good.levels,
        quantiles=tuple(p.quantiles for p in good.points) if good.levels else (),
    )
    return list(view.bounds(level, 1.0))


def bound_state(pool: Pool) -> tuple[str, str] | None:
    """Where the pool's desired count sits against its bounds, as a badge's text and class: ``at max (wants 7)``
    (warn: demand it cannot meet), ``at max``, ``at min``; None: between them, or not decided yet."""
    desired, spec = pool.desired_replicas, pool.spec
    if desired is None:
        return None
    wanted = pool.provisioning.wanted if pool.provisioning is not None else None
    if desired >= spec.max_replicas:
        return (f"at max (wants {wanted})", "warn") if wanted is not None and wanted > desired else ("at max", "")
    if desired <= spec.min_replicas:
        return "at min", ""
    return None


def _distrusted(forecast: StoredForecast | None) -> str | None:
    """Why the autoscaler does not follow this pool's forecast (its live accuracy), or None."""
    day = (forecast.accuracy or {}).get("24h") if forecast is not None else None
    return distrusted(day) if day is not None else None


def _capacity_missing(forecast: StoredForecast | None) -> str | None:
    """Why the forecast loop learned no per-replica capacity for the pool (None: it has one, or it has not tried)."""
    pool_capacity = forecast.good.pool_capacity if forecast is not None and forecast.good is not None else None
    return None if pool_capacity is None else pool_capacity.missing


def per_replica_capacity(pool: Pool, forecast: StoredForecast | None) -> float | None:
    """The configured capacity, else the one the forecast loop learned; None when neither is known."""
    capacity = replica_capacity(pool.spec.replica_capacity, lambda: forecast.learned_capacity if forecast else None)
    return None if capacity is None else capacity.per_replica


def _pool_page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    name: str,
    *,
    errors: dict[str, str] | None = None,
    form: FormData | None = None,
    time_range: TimeRange = RANGES[DEFAULT_RANGE],
) -> HTMLResponse:
    pool = services.pools.get(name)
    if pool is None:
        raise PageNotFound(f"no pool {name!r}")
    now = services.clock()
    forecast = services.forecasts.get(SubjectKind.POOL, name)
    current = services.fleet.read(now).ready_replicas()
    charts = _pool_charts(services, pool, forecast, time_range, now, now - time_range.seconds)
    return page(
        request,
        "pool.html",
        user,
        status_code=422 if errors else 200,
        pool=pool,
        now=now,
        ready=current.get(name, 0),
        bound=bound_state(pool),
        manual=pool.manual_at(now),
        forecast=forecast,
        saturation=(forecast.good.saturation or {}) if forecast is not None and forecast.good is not None else {},
        capacity=per_replica_capacity(pool, forecast),
        capacity_missing=_capacity_missing(forecast),
        # a window with no scored forecast yet has no figures to show: the page says "not scored yet" instead
        accuracy=[w for w in (forecast.accuracy or {}).values() if w.forecasts] if forecast is not None else [],
        distrusted=_distrusted(forecast),
        events=services.events.list(pool=name, limit=50),
        provisioning=pool.provisioning,
        attainment_target=pool.spec.slo_attainment,
        selection=forecast.good.selection if forecast is not None and forecast.good is not None else None,
        ranges=RANGES.values(),
        time_range=time_range,
        charts_json=script_json({"window": window(time_range, now, ahead=FORECAST_AHEAD_SECONDS), "charts": charts}),
        errors=errors or {},
        form=form,
        done=DONE.get(request.query_params.get("done", "")),
    )


@router.get("/pools", response_class=HTMLResponse)
def pools(request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    return pools_page(request, user, services)


def pools_page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    *,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """The configured pools with their figures, and the pools nodes report that nobody configured (``errors``: a
    refused adoption, by pool)."""
    now = services.clock()
    view = services.fleet.read(now)
    current = view.ready_replicas()
    configured = services.pools.list()
    rows = []
    for pool in configured:
        forecast = services.forecasts.get(SubjectKind.POOL, pool.name)
        saturation = (forecast.good.saturation or {}) if forecast is not None and forecast.good is not None else {}
        rows.append(
            {
                "pool": pool,
                "ready": current.get(pool.name, 0),
                "saturation": saturation,
                "manual": pool.manual_at(now),
                "bound": bound_state(pool),
            }
        )
    on_nodes = view.pools_on_nodes
    with services.engine.connect() as conn:
        sources = node_sources(conn, sorted({p.node_id for p in on_nodes}))
    unconfigured = unconfigured_pools(on_nodes, {p.name for p in configured}, sources)
    return page(
        request,
        "pools.html",
        user,
        status_code=status_code,
        rows=rows,
        unconfigured=unconfigured,
        current=current,
        errors=errors or {},
    )


@router.get("/pools/{name}", response_class=HTMLResponse)
def pool_detail(
    name: str,
    request: Request,
    user: Viewer,
    services: ServicesDep,
    range_: RangeKey = DEFAULT_RANGE,
) -> Response:
    """A pool's page; a pool nodes report and nobody configured has none yet: its nodes on the Fleet page instead
    (an alert's generatorURL names the pool either way)."""
    if services.pools.get(name) is None:
        with services.engine.connect() as conn:
            reported = name in reported_pools(conn)
        if reported:
            return RedirectResponse(f"/?pool={quote(name, safe='')}", status_code=status.HTTP_303_SEE_OTHER)
    return _pool_page(request, user, services, name, time_range=RANGES[range_])


def _live_update(services: AppServices, name: str, time_range: TimeRange) -> dict[str, Any] | None:
    """One live event: the charts' last ``TAIL_SECONDS`` (and the whole desired line and forecast), the figures."""
    pool = services.pools.get(name)
    if pool is None:
        return None
    now = services.clock()
    forecast = services.forecasts.get(SubjectKind.POOL, name)
    charts = _pool_charts(services, pool, forecast, time_range, now, now - TAIL_SECONDS)
    ready = services.fleet.read(now).ready_replicas().get(name, 0)
    desired = "—" if pool.desired_replicas is None else str(pool.desired_replicas)
    return {"now": now, "charts": {c["id"]: c["tables"] for c in charts}, "ready": str(ready), "desired": desired}


@router.get("/pools/{name}/live")
async def pool_live(
    name: str,
    request: Request,
    user: Viewer,
    services: ServicesDep,
    events: Annotated[int | None, Query(ge=1, le=100_000, description="stop after this many events")] = None,
) -> StreamingResponse:
    """``text/event-stream``: every second, the last ``TAIL_SECONDS`` of the pool page's live charts (its demand in
    1 s buckets, its replicas in 5 s), the whole desired line and forecast, and the ready and desired figures,
    until the browser goes away or the session ends (re-checked as the node page's stream does)."""
    if services.pools.get(name) is None:
        raise PageNotFound(f"no pool {name!r}")
    live = RANGES[DEFAULT_RANGE]
    read = lambda: _live_update(services, name, live)  # noqa: E731
    return event_stream(request, services, user, read, interval_s=LIVE_INTERVAL_SECONDS, events=events)


@router.post("/pools/{name}/scale", response_class=HTMLResponse)
def scale(
    name: str, request: Request, user: Operator, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's scale (``apply_pool_scale``): the same checks, refusals and audit row; the form's hidden version
    stands for the API's ``If-Match``, so a pool that another operator changed meanwhile is not scaled blindly."""
    try:
        body = ScaleIn.model_validate({"replicas": field(form, "replicas"), "reason": field(form, "reason")})
        apply_pool_scale(
            audit,
            name,
            body,
            now=services.clock(),
            default_duration_seconds=services.settings.manual_scale_seconds,
            if_match=posted_version(form),
        )
    except ValidationError as exc:
        at, message = validation_problem(exc)
        return _pool_page(request, user, services, name, form=form, errors={at: message})
    except ApiError as exc:
        return _refused(request, user, services, name, form, "replicas", exc)
    return RedirectResponse(f"/pools/{name}?done=scaled", status_code=303)


@router.post("/pools/{name}/mode", response_class=HTMLResponse)
def switch_mode(
    name: str, request: Request, user: Operator, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's PATCH of ``mode`` (``apply_pool_patch``), with the form's version as the body's ``version``."""
    try:
        body = PoolPatch.model_validate({"mode": field(form, "mode"), "version": field(form, "version") or None})
        apply_pool_patch(audit, name, body, now=services.clock())
    except ValidationError as exc:
        return _pool_page(request, user, services, name, form=form, errors={"mode": validation_problem(exc)[1]})
    except ApiError as exc:
        return _refused(request, user, services, name, form, "mode", exc)
    return RedirectResponse(f"/pools/{name}?done=mode", status_code=303)


def _refused(
    request: Request, user: DashboardUser, services: AppServices, name: str, form: FormData, at: str, exc: ApiError
) -> HTMLResponse:
    """An unknown pool is the 404 page; any other refusal is shown by the form ``at``, in the API's words."""
    if exc.status_code == status.HTTP_404_NOT_FOUND:
        raise PageNotFound(exc.message)
    return _pool_page(request, user, services, name, form=form, errors={at: exc.message})
