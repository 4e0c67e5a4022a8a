"""``GET /pools`` and ``/pools/{name}``: replicas (ready, running, desired) over time, demand against capacity with
the forecast's 90 % band and the predicted saturation, the scaling events with their reasons; operators scale by
hand and switch dry-run through the REST API's own functions, so each change is checked, refused and audited as the
API does it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from autoscaler.policy import PolicySettings
from collector.series import SeriesQuery, pool_replica_history, query_series
from fleet.pools import Pool
from predictor.accuracy import distrusted
from predictor.store import StoredForecast, SubjectKind
from web.audit import AuditorDep
from web.auth import ServicesDep
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
from web.dashboard.render import page, script_json
from web.dashboard.security import DashboardRoute
from web.errors import ApiError
from web.routes.pools import PoolPatch, ScaleIn, apply_pool_patch, apply_pool_scale
from web.services import AppServices

router = APIRouter(route_class=DashboardRoute)
REPLICA_HISTORY_SECONDS = 1800.0
REPLICA_STEP_SECONDS = 10.0
DEMAND_HISTORY_SECONDS = 7200.0
DONE = {"scaled": "Manual scale recorded: the controller applies it at its next decision.", "mode": "Mode changed."}


def _ms(ts: float) -> float:
    return ts * 1000.0


def _replica_chart(services: AppServices, pool: Pool, now: float) -> dict[str, Any]:
    start = now - REPLICA_HISTORY_SECONDS
    with services.engine.connect() as conn:
        history = pool_replica_history(conn, pool.name, start, now, REPLICA_STEP_SECONDS)
    decided = [e for e in services.events.list(pool=pool.name, limit=200) if e.ts >= start]
    desired = [(_ms(e.ts), e.to_replicas) for e in reversed(decided)]
    if pool.desired_replicas is not None:
        desired.append((_ms(now), pool.desired_replicas))
    return {
        "ready": {"x": [_ms(t) for t, _r, _s in history], "y": [r for _t, r, _s in history]},
        "running": {"x": [_ms(t) for t, _r, _s in history], "y": [r + s for _t, r, s in history]},
        "desired": {"x": [x for x, _ in desired], "y": [y for _, y in desired]},
    }


def _distrusted(forecast: StoredForecast | None) -> str | None:
    """Why the autoscaler does not follow this pool's forecast (its live accuracy), or None."""
    day = (forecast.accuracy or {}).get("24h") if forecast is not None else None
    return distrusted(day) if day is not None else None


def per_replica_capacity(pool: Pool, forecast: StoredForecast | None) -> float | None:
    """The configured capacity, else the one the forecast loop learned; None when neither is known."""
    if pool.spec.replica_capacity is not None:
        return pool.spec.replica_capacity
    return forecast.learned_capacity if forecast is not None else None


def _demand_chart(services: AppServices, pool: Pool, forecast: StoredForecast | None, now: float) -> dict[str, Any]:
    query = SeriesQuery(pool.spec.demand_metric.value, now - DEMAND_HISTORY_SECONDS, now, pool=pool.name)
    with services.engine.connect() as conn:
        actual = query_series(conn, query, raw_max_seconds=services.settings.raw_query_max_seconds).points
        replicas = pool_replica_history(conn, pool.name, now - DEMAND_HISTORY_SECONDS, now, 60.0)
    capacity = per_replica_capacity(pool, forecast)
    chart: dict[str, Any] = {"actual": {"x": [_ms(t) for t, _ in actual], "y": [v for _, v in actual]}}
    if capacity is not None:
        chart["capacity"] = {"x": [_ms(t) for t, _r, _s in replicas], "y": [r * capacity for _t, r, _s in replicas]}
    good = forecast.good if forecast is not None else None
    if good is not None:
        chart["forecast"] = {
            "x": [_ms(p.ts) for p in good.points],
            "yhat": [p.yhat for p in good.points],
            "lo": [p.lo for p in good.points],
            "hi": [p.hi for p in good.points],
        }
        limit = (good.saturation or {}).get("capacity")
        if isinstance(limit, int | float) and good.points:
            chart["limit"] = {"x": [_ms(good.points[0].ts), _ms(good.points[-1].ts)], "y": [limit, limit]}
    return chart


def _pool_page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    name: str,
    *,
    errors: dict[str, str] | None = None,
    form: FormData | None = None,
) -> HTMLResponse:
    pool = services.pools.get(name)
    if pool is None:
        raise PageNotFound(f"no pool {name!r}")
    now = services.clock()
    forecast = services.forecasts.get(SubjectKind.POOL, name)
    current = services.fleet.read(now).ready_replicas()
    charts = {
        "replicas": _replica_chart(services, pool, now),
        "demand": _demand_chart(services, pool, forecast, now),
        "unit": pool.spec.demand_metric.value,
    }
    return page(
        request,
        "pool.html",
        user,
        status_code=422 if errors else 200,
        pool=pool,
        now=now,
        ready=current.get(name, 0),
        manual=pool.manual_at(now),
        forecast=forecast,
        saturation=(forecast.good.saturation or {}) if forecast is not None and forecast.good is not None else {},
        capacity=per_replica_capacity(pool, forecast),
        accuracy=list((forecast.accuracy or {}).values()) if forecast is not None else [],
        distrusted=_distrusted(forecast),
        events=services.events.list(pool=name, limit=50),
        provisioning=pool.provisioning,
        attainment_target=PolicySettings().attainment_target,
        charts_json=script_json(charts),
        errors=errors or {},
        form=form,
        done=DONE.get(request.query_params.get("done", "")),
    )


@router.get("/pools", response_class=HTMLResponse)
def pools(request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    now = services.clock()
    current = services.fleet.read(now).ready_replicas()
    rows = []
    for pool in services.pools.list():
        forecast = services.forecasts.get(SubjectKind.POOL, pool.name)
        saturation = (forecast.good.saturation or {}) if forecast is not None and forecast.good is not None else {}
        rows.append(
            {"pool": pool, "ready": current.get(pool.name, 0), "saturation": saturation, "manual": pool.manual_at(now)}
        )
    unmanaged = sorted(set(current) - {p.name for p in services.pools.list()})
    return page(request, "pools.html", user, rows=rows, unmanaged=unmanaged, current=current)


@router.get("/pools/{name}", response_class=HTMLResponse)
def pool_detail(name: str, request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    return _pool_page(request, user, services, name)


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
