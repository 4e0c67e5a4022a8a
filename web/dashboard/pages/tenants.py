"""``GET /tenants``: tenants with their SLO class, quotas per pool (editable by operators), their traffic on every pool
they use (against its quota where they have one; the traffic of a caller no tenant record names, such as ``default``,
apart), their serving API keys (admins create — the key shown once — and revoke them) and the enforcer's throttles and
restores. Every edit goes through the REST API's own function, so an impossible quota (more GPU memory than the pool's
GPUs have, SM shares past 100 %) is refused with the same message, and each change is audited as the API audits it."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from collector.registry import PoolOnNode
from isolation.tenant_keys import TenantKey, TenantKeyStore
from isolation.tenants import QUOTA_FIELDS, Tenant, TenantNotFound, TenantStore
from web.auth import ServicesDep
from web.changes.audit import AuditorDep
from web.changes.tenant_keys import apply_tenant_key_create, apply_tenant_key_delete
from web.changes.tenants import apply_quota_put, apply_tenant_create, apply_tenant_patch
from web.dashboard.deps import (
    Admin,
    CsrfForm,
    DashboardUser,
    Operator,
    PageNotFound,
    Viewer,
    field,
    validation_problem,
)
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.errors import ApiError
from web.schemas.tenant_keys import TenantKeyIn
from web.schemas.tenants import QuotaPut, TenantIn, TenantPatch
from web.services import AppServices
from web.tokens import Role
from wire.control import NAME_PATTERN, SloClass

router = APIRouter(route_class=DashboardRoute)
USAGE_FIGURES = ("requests_per_second", "tokens_per_second", "latency_p99_seconds")
DONE = {
    "quota": "Quota saved.",
    "class": "SLO class saved.",
    "created": "Tenant created.",
    "revoked": "Key revoked: the agents refuse it from their next desired state on.",
}


def tenant_usage(pools: Iterable[PoolOnNode]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (tenant, pool), the usage the nodes' reports give: rates add up over the nodes, the p99 is the worst."""
    usage: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for on_node in pools:
        for tenant, used in on_node.tenants.items():
            figures = usage[(tenant, on_node.pool)]
            for name in USAGE_FIGURES:
                value = getattr(used, name)
                if value is None:
                    continue
                if name not in figures:
                    figures[name] = value
                elif name == "latency_p99_seconds":
                    figures[name] = max(figures[name], value)
                else:
                    figures[name] += value
    return dict(usage)


def pools_used(tenant: Tenant, usage: Mapping[tuple[str, str], Mapping[str, float]]) -> list[str]:
    """The pools a tenant's row lists: those it has a quota on and those the nodes report its traffic on, by name
    (acme with a quota on vision sending to chat too → chat, vision)."""
    return sorted(set(tenant.quotas) | {pool for name, pool in usage if name == tenant.name})


def _usage(services: AppServices) -> dict[tuple[str, str], dict[str, float]]:
    return tenant_usage(services.fleet.pools_served(services.clock()))


def _keys(services: AppServices, listed: list[Tenant]) -> dict[str, list[TenantKey]]:
    """Each tenant's keys, oldest first: names and prefixes, never a secret; a tenant deleted since it was listed has
    none."""
    store = TenantKeyStore(services.engine)
    keys: dict[str, list[TenantKey]] = {}
    for tenant in listed:
        try:
            keys[tenant.name] = store.list(tenant.name)
        except TenantNotFound:
            continue
    return keys


def _page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    *,
    status_code: int | None = None,
    error: dict[str, str] | None = None,
    form: FormData | None = None,
    new_key: dict[str, str] | None = None,
) -> HTMLResponse:
    listed = TenantStore(services.engine).list()
    usage = _usage(services)
    known = {t.name for t in listed}
    return page(
        request,
        "tenants.html",
        user,
        status_code=status_code or (422 if error else 200),
        tenants=listed,
        keys=_keys(services, listed) if user.can(Role.ADMIN.value) else {},
        new_key=new_key,
        usage=usage,
        pools={t.name: pools_used(t, usage) for t in listed},
        unknown=sorted(((key, figures) for key, figures in usage.items() if key[0] not in known), key=lambda kv: kv[0]),
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
    """The form's quota fields and version; an empty field is no limit (null), as in the API."""
    return {**{name: field(form, name) or None for name in QUOTA_FIELDS}, "version": field(form, "version") or None}


def _refused(where: dict[str, str], at: str, message: str) -> dict[str, str]:
    """The inline error of the form ``where`` names: the field ``at`` fault ('' for none) and the message."""
    return {**where, "field": at, "message": message}


def _shown_by_form(exc: ApiError) -> ApiError:
    """The refusal to show by its form; a tenant that no longer exists has no form, so the 404 page says so instead."""
    if exc.status_code == status.HTTP_404_NOT_FOUND:
        raise PageNotFound(exc.message)
    return exc


@router.post("/tenants/{name}/quotas", response_class=HTMLResponse)
def put_quota(
    name: str, request: Request, user: Operator, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's quota PUT (``apply_quota_put``): an impossible quota is refused with the API's message."""
    pool = field(form, "pool")
    where = {"form": f"{name}/{pool}", "tenant": name, "pool": pool}
    try:
        if not re.fullmatch(NAME_PATTERN, pool):  # the pool name as the API's path checks it
            raise ApiError(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"pool: {pool!r} is not a pool name (letters, digits, . _ : -)",
                field="pool",
            )
        body = QuotaPut.model_validate(_quota_body(form))
        apply_quota_put(audit, name, pool, body, now=services.clock(), publish=services.publish_tenants)
    except ValidationError as exc:
        at, message = validation_problem(exc)
        return _page(request, user, services, form=form, error=_refused(where, at, message))
    except ApiError as exc:
        refusal = _shown_by_form(exc)
        return _page(request, user, services, form=form, error=_refused(where, refusal.field or "", refusal.message))
    return RedirectResponse("/tenants?done=quota", status_code=303)


@router.post("/tenants/{name}/class", response_class=HTMLResponse)
def set_class(
    name: str, request: Request, user: Operator, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's tenant PATCH (``apply_tenant_patch``), with the form's version as the body's ``version``."""
    where = {"form": f"{name}/class", "tenant": name}
    try:
        body = TenantPatch.model_validate(
            {"slo_class": field(form, "slo_class"), "version": field(form, "version") or None}
        )
        apply_tenant_patch(audit, name, body, now=services.clock(), publish=services.publish_tenants)
    except ValidationError as exc:
        return _page(request, user, services, form=form, error=_refused(where, "slo_class", validation_problem(exc)[1]))
    except ApiError as exc:
        return _page(
            request, user, services, form=form, error=_refused(where, "slo_class", _shown_by_form(exc).message)
        )
    return RedirectResponse("/tenants?done=class", status_code=303)


@router.post("/tenants", response_class=HTMLResponse)
def create(request: Request, user: Admin, form: CsrfForm, services: ServicesDep, audit: AuditorDep) -> Response:
    """The API's tenant POST (``apply_tenant_create``), without quotas (they are added one by one after)."""
    where = {"form": "new", "tenant": field(form, "name")}
    try:
        body = TenantIn.model_validate({"name": field(form, "name"), "slo_class": field(form, "slo_class")})
        apply_tenant_create(audit, body, now=services.clock(), publish=services.publish_tenants)
    except ValidationError as exc:
        at, message = validation_problem(exc)
        return _page(request, user, services, form=form, error=_refused(where, at, message))
    except ApiError as exc:
        return _page(request, user, services, form=form, error=_refused(where, "name", exc.message))
    return RedirectResponse("/tenants?done=created", status_code=303)


@router.post("/tenants/{name}/keys", response_class=HTMLResponse)
def create_key(
    name: str, request: Request, user: Admin, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's key POST (``apply_tenant_key_create``). Answers the page itself (not a redirect) so the new key is
    shown exactly once and never in a URL."""
    where = {"form": f"{name}/keys", "tenant": name}
    try:
        body = TenantKeyIn.model_validate({"name": field(form, "name")})
        key, clear = apply_tenant_key_create(audit, name, body, now=services.clock(), publish=services.publish_tenants)
    except ValidationError as exc:
        at, message = validation_problem(exc)
        return _page(request, user, services, form=form, error=_refused(where, at, message))
    except ApiError as exc:
        refusal = _shown_by_form(exc)
        return _page(request, user, services, form=form, error=_refused(where, "name", refusal.message))
    shown = {"tenant": name, "name": key.name, "key": clear}
    response = _page(request, user, services, status_code=status.HTTP_201_CREATED, new_key=shown)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/tenants/{name}/keys/{key_id}/revoke", response_class=HTMLResponse)
def revoke_key(
    name: str, key_id: str, request: Request, user: Admin, _form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's key DELETE (``apply_tenant_key_delete``): the agents refuse the key from their next desired state."""
    try:
        apply_tenant_key_delete(audit, name, key_id, publish=services.publish_tenants)
    except ApiError as exc:
        refusal = _shown_by_form(exc)  # no such tenant or key: the 404 page names it
        where = {"form": f"{name}/keys", "tenant": name}
        error = _refused(where, "", refusal.message)
        return _page(request, user, services, status_code=refusal.status_code, error=error)
    return RedirectResponse("/tenants?done=revoked", status_code=303)
