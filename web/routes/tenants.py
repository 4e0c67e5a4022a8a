"""``/api/v1/tenants``: read tenants (viewer), edit their class and quotas (operator), create and delete them (admin).

A quota that cannot hold with the other tenants of its pool is refused with 422 naming the field and by how much,
and nothing is stored. A GET answers the tenant's ``ETag``; an edit of the tenant or of one of its quotas with
``If-Match`` goes ahead only while the tenant is still at that version (else 412); a body ``version`` still works
(409 when the tenant changed since). Every change is audited (``web.audit``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response, status
from pydantic import BaseModel, Field

from isolation.tenants import MAX_CONCURRENCY, MAX_GPU_MEMORY_MIB, QuotaSpec, Tenant, TenantStore
from web.audit import Auditor, AuditorDep
from web.auth import AdminToken, OperatorToken, ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, error_responses, not_found, refused
from web.etags import IfMatch, require_match, tag
from wire.control import NAME_PATTERN, SloClass

router = APIRouter(tags=["tenants"], responses=ERROR_RESPONSES)

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
# Publishes the tenants part after a change (AppServices.publish_tenants), so the nodes hear of it at their next push.
Publish = Callable[[], object]
PoolInPath = Annotated[str, Path(pattern=NAME_PATTERN)]


def _store(services: ServicesDep) -> TenantStore:
    return TenantStore(services.engine)


StoreDep = Annotated[TenantStore, Depends(_store)]


class Quota(BaseModel):
    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    gpu_memory_mib: int | None = Field(
        None, ge=1, le=MAX_GPU_MEMORY_MIB, description="GPU memory each replica pins; rounded up to 128 MiB (MPS)"
    )
    active_thread_percentage: int | None = Field(None, ge=1, le=100, description="share of the GPU's SMs (MPS)")
    max_concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, description="requests in flight per replica")
    rate_rps: float | None = Field(None, gt=0, description="requests per second (a token bucket)")
    tokens_per_second: float | None = Field(None, gt=0, description="generated tokens per second")


class QuotaPut(Quota):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {"gpu_memory_mib": 16384, "active_thread_percentage": 40, "max_concurrency": 8, "rate_rps": 50}
            ]
        }
    }

    version: int | None = Field(None, description="the tenant version this edit is based on; 409 if it moved on")


class TenantIn(BaseModel):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "name": "search",
                    "slo_class": "latency_critical",
                    "quotas": {"llama-8b": {"gpu_memory_mib": 16384, "active_thread_percentage": 40, "rate_rps": 50}},
                }
            ]
        }
    }

    name: Name
    slo_class: SloClass = SloClass.STANDARD
    quotas: dict[Name, Quota] = Field(default_factory=dict, description="by pool")


class TenantPatch(BaseModel):
    model_config = {"json_schema_extra": {"examples": [{"slo_class": "batch"}]}}

    slo_class: SloClass
    version: int | None = Field(None, description="the version this edit is based on; 409 if the tenant moved on")


class TenantOut(TenantIn):
    version: int
    created_at: float
    updated_at: float


class TenantPage(BaseModel):
    items: list[TenantOut]
    next: str | None = None


def _out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        name=tenant.name,
        slo_class=tenant.slo_class,
        quotas={pool: Quota(**asdict(q)) for pool, q in sorted(tenant.quotas.items())},
        version=tenant.version,
        created_at=tenant.created_at,
        updated_at=tenant.updated_at,
    )


def _spec(quota: Quota) -> QuotaSpec:
    return QuotaSpec(**quota.model_dump(include=set(Quota.model_fields)))


def _found(store: TenantStore, name: str) -> Tenant:
    tenant = store.get(name)
    if tenant is None:
        raise not_found(f"no tenant {name!r}")
    return tenant


def _answer(tenant: Tenant, response: Response) -> TenantOut:
    tag(response, tenant.version)
    return _out(tenant)


def _audited(tenant: Tenant | None) -> dict[str, object] | None:
    return None if tenant is None else _out(tenant).model_dump(mode="json")


@router.get("/tenants")
def list_tenants(store: StoreDep, _token: ViewerToken) -> TenantPage:
    return TenantPage(items=[_out(t) for t in store.list()])


@router.get("/tenants/{name}", responses=error_responses(404))
def get_tenant(name: str, store: StoreDep, _token: ViewerToken, response: Response) -> TenantOut:
    return _answer(_found(store, name), response)


def apply_tenant_create(audit: Auditor, body: TenantIn, *, now: float, publish: Publish) -> Tenant:
    """Create a tenant, audited as ("tenant", "create"): the API's POST and the dashboard's new-tenant form. Then
    ``publish`` (``AppServices.publish_tenants``): the nodes are told at their next push."""
    try:
        quotas = {pool: _spec(q) for pool, q in body.quotas.items()}
        with audit.change("tenant", "create", body.name) as change:
            tenant = TenantStore(change.engine).create(body.name, body.slo_class, quotas, now=now)
            change.after = _audited(tenant)
    except ValueError as exc:
        raise refused(exc) from None
    publish()
    return tenant


@router.post("/tenants", status_code=status.HTTP_201_CREATED, responses=error_responses(404, 409))
def create_tenant(
    body: TenantIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep, response: Response
) -> TenantOut:
    return _answer(apply_tenant_create(audit, body, now=services.clock(), publish=services.publish_tenants), response)


def apply_tenant_patch(
    audit: Auditor,
    name: str,
    body: TenantPatch,
    *,
    now: float,
    publish: Publish,
    if_match: frozenset[int] | None = None,
) -> Tenant:
    """Change a tenant's SLO class, audited as ("tenant", "update"): the API's PATCH and the dashboard's class form."""
    try:
        with audit.change("tenant", "update", name) as change:
            store = TenantStore(change.engine)
            before = _found(store, name)
            require_match(if_match, before.version, f"tenant {name!r}")
            tenant = store.update(name, body.slo_class, now=now, expected_version=body.version)
            change.before, change.after = _audited(before), _audited(tenant)
    except ValueError as exc:
        raise refused(exc) from None
    publish()
    return tenant


@router.patch("/tenants/{name}", responses=error_responses(404, 409, 412))
def patch_tenant(
    name: str,
    body: TenantPatch,
    services: ServicesDep,
    _token: OperatorToken,
    audit: AuditorDep,
    if_match: IfMatch,
    response: Response,
) -> TenantOut:
    tenant = apply_tenant_patch(
        audit, name, body, now=services.clock(), publish=services.publish_tenants, if_match=if_match
    )
    return _answer(tenant, response)


@router.delete("/tenants/{name}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404, 412))
def delete_tenant(
    name: str, services: ServicesDep, _token: AdminToken, audit: AuditorDep, if_match: IfMatch
) -> Response:
    with audit.change("tenant", "delete", name) as change:
        store = TenantStore(change.engine)
        before = _found(store, name)
        require_match(if_match, before.version, f"tenant {name!r}")
        store.delete(name)
        change.before = _audited(before)
    services.publish_tenants()  # the last tenant gone: an empty part, nothing limited any more
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def apply_quota_put(
    audit: Auditor,
    name: str,
    pool: str,
    body: QuotaPut,
    *,
    now: float,
    publish: Publish,
    if_match: frozenset[int] | None = None,
) -> Tenant:
    """Set the tenant's quota on ``pool`` (replacing any), audited as ("quota", "update"): the API's PUT and the
    dashboard's quota form. A quota that cannot hold with the pool's other tenants is refused 422 naming its field."""
    try:
        with audit.change("quota", "update", f"{name}/{pool}") as change:
            store = TenantStore(change.engine)
            before = _found(store, name)
            require_match(if_match, before.version, f"tenant {name!r}")
            tenant = store.put_quota(name, pool, _spec(body), now=now, expected_version=body.version)
            change.before, change.after = _audited(before), _audited(tenant)
    except ValueError as exc:
        raise refused(exc) from None
    publish()
    return tenant


@router.put("/tenants/{name}/quotas/{pool}", responses=error_responses(404, 409, 412))
def put_quota(
    name: str,
    pool: PoolInPath,
    body: QuotaPut,
    services: ServicesDep,
    _token: OperatorToken,
    audit: AuditorDep,
    if_match: IfMatch,
    response: Response,
) -> TenantOut:
    """Set the tenant's quota on ``pool`` (replacing any); the answer is the tenant with all its quotas."""
    tenant = apply_quota_put(
        audit, name, pool, body, now=services.clock(), publish=services.publish_tenants, if_match=if_match
    )
    return _answer(tenant, response)


@router.delete(
    "/tenants/{name}/quotas/{pool}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404, 412)
)
def delete_quota(
    name: str, pool: str, services: ServicesDep, _token: OperatorToken, audit: AuditorDep, if_match: IfMatch
) -> Response:
    with audit.change("quota", "delete", f"{name}/{pool}") as change:
        store = TenantStore(change.engine)
        before = _found(store, name)
        require_match(if_match, before.version, f"tenant {name!r}")
        tenant = store.delete_quota(name, pool, now=services.clock())
        change.before, change.after = _audited(before), _audited(tenant)
    services.publish_tenants()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
