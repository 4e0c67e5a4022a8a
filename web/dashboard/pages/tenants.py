"""``GET /tenants``: tenants with their SLO class, quotas per pool (editable by operators), usage against each quota
and the enforcer's throttles and restores. A quota is checked by the same model and store the REST API uses, so an
impossible one (more GPU memory than the pool's GPUs have, SM shares past 100 %) is refused with the same message."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from collector.registry import LatestSeries, NodeStatus, node_statuses, read_latest
from collector.wire import NAME_PATTERN
from isolation.tenants import QUOTA_FIELDS, QuotaSpec, SloClass, TenantStore
from isolation.validation import QuotaConflict
from web.auth import ServicesDep
from web.dashboard.deps import Admin, CsrfForm, DashboardUser, Operator, Viewer, field, validation_problem
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.routes.tenants import Quota, TenantIn
from web.services import AppServices

router = APIRouter(route_class=DashboardRoute)
USAGE_FIGURES = ("requests_per_second", "tokens_per_second", "latency_p99_seconds")
DONE = {"quota": "Quota saved.", "class": "SLO class saved.", "created": "Tenant created."}


def tenant_usage(readings: Iterable[LatestSeries]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (tenant, pool), the agents' per-tenant figures over the nodes: rates add up, the p99 is the worst."""
    usage: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for reading in readings:
        tenants = (reading.extra or {}).get("tenants")
        if reading.pool is None or not isinstance(tenants, Mapping):
            continue
        for tenant, body in tenants.items():
            if not isinstance(body, Mapping):
                continue
            figures = usage[(tenant, reading.pool)]
            for name in USAGE_FIGURES:
                value = body.get(name)
                if not isinstance(value, int | float) or isinstance(value, bool):
                    continue
                if name not in figures:
                    figures[name] = float(value)
                elif name == "latency_p99_seconds":
                    figures[name] = max(figures[name], float(value))
                else:
                    figures[name] += float(value)
    return dict(usage)


def _usage(services: AppServices) -> dict[tuple[str, str], dict[str, float]]:
    now = services.clock()
    with services.engine.connect() as conn:
        statuses = node_statuses(conn, now=now, down_after_seconds=services.settings.node_down_after_seconds)
        up = sorted(n for n, s in statuses.items() if s is NodeStatus.UP)
        return tenant_usage(read_latest(conn, up, pools_only=True))


def _page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    *,
    error: dict[str, str] | None = None,
    form: FormData | None = None,
) -> HTMLResponse:
    return page(
        request,
        "tenants.html",
        user,
        status_code=422 if error else 200,
        tenants=TenantStore(services.engine).list(),
        usage=_usage(services),
        events=services.enforcement.list(limit=50),
        classes=[c.value for c in SloClass],
        quota_fields=QUOTA_FIELDS,
        error=error or {},
        form=form,
        done=DONE.get(request.query_params.get("done", "")),
    )


@router.get("/tenants", response_class=HTMLResponse)
def tenants(request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    return _page(request, user, services)


def _quota_body(form: FormData) -> dict[str, Any]:
    """The form's quota fields; an empty field is no limit (null), as in the API."""
    return {name: field(form, name) or None for name in QUOTA_FIELDS}


@router.post("/tenants/{name}/quotas", response_class=HTMLResponse)
def put_quota(name: str, request: Request, user: Operator, form: CsrfForm, services: ServicesDep) -> Response:
    pool = field(form, "pool")
    where = {"form": f"{name}/{pool}", "tenant": name, "pool": pool}
    try:
        if not re.fullmatch(NAME_PATTERN, pool):  # the pool name as the API's path checks it
            raise QuotaConflict("pool", f"{pool!r} is not a pool name (letters, digits, . _ : -)")
        quota = Quota.model_validate(_quota_body(form))
        spec = QuotaSpec(**quota.model_dump(include=set(Quota.model_fields)))
        version = int(field(form, "version")) if field(form, "version") else None
        TenantStore(services.engine).put_quota(name, pool, spec, now=services.clock(), expected_version=version)
    except ValidationError as exc:
        at, message = validation_problem(exc)
        return _page(request, user, services, form=form, error={**where, "field": at, "message": message})
    except QuotaConflict as exc:
        return _page(request, user, services, form=form, error={**where, "field": exc.field, "message": str(exc)})
    except (LookupError, ValueError) as exc:
        return _page(request, user, services, form=form, error={**where, "field": "", "message": str(exc)})
    return RedirectResponse("/tenants?done=quota", status_code=303)


@router.post("/tenants/{name}/class", response_class=HTMLResponse)
def set_class(name: str, request: Request, user: Operator, form: CsrfForm, services: ServicesDep) -> Response:
    try:
        TenantStore(services.engine).update(name, SloClass(field(form, "slo_class")), now=services.clock())
    except (LookupError, ValueError) as exc:
        where = {"form": f"{name}/class", "tenant": name, "field": "slo_class", "message": str(exc)}
        return _page(request, user, services, form=form, error=where)
    return RedirectResponse("/tenants?done=class", status_code=303)


@router.post("/tenants", response_class=HTMLResponse)
def create(request: Request, user: Admin, form: CsrfForm, services: ServicesDep) -> Response:
    where = {"form": "new", "tenant": field(form, "name")}
    try:
        body = TenantIn.model_validate({"name": field(form, "name"), "slo_class": field(form, "slo_class")})
        TenantStore(services.engine).create(body.name, body.slo_class, {}, now=services.clock())
    except ValidationError as exc:
        at, message = validation_problem(exc)
        return _page(request, user, services, form=form, error={**where, "field": at, "message": message})
    except (LookupError, ValueError) as exc:
        return _page(request, user, services, form=form, error={**where, "field": "name", "message": str(exc)})
    return RedirectResponse("/tenants?done=created", status_code=303)
