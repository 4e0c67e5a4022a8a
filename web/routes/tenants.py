"""``/api/v1/tenants``: read tenants (viewer), edit their class and quotas (operator), create and delete them (admin).

A quota that cannot hold with the other tenants of its pool is refused with 422 naming the field and by how much,
and nothing is stored. An edit may carry the ``version`` it read: 409 when the tenant changed since.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Response, status
from pydantic import BaseModel, Field

from collector.wire import NAME_PATTERN
from isolation.tenants import (
    MAX_CONCURRENCY,
    MAX_GPU_MEMORY_MIB,
    QuotaSpec,
    SloClass,
    Tenant,
    TenantExists,
    TenantStore,
    VersionConflict,
)
from web.auth import AdminToken, OperatorToken, ServicesDep, ViewerToken

router = APIRouter(tags=["tenants"])

Name = Annotated[str, Field(pattern=NAME_PATTERN)]
PoolInPath = Annotated[str, Path(pattern=NAME_PATTERN)]


def _store(services: ServicesDep) -> TenantStore:
    return TenantStore(services.engine)


StoreDep = Annotated[TenantStore, Depends(_store)]


class Quota(BaseModel):
    gpu_memory_mib: int | None = Field(
        None, ge=1, le=MAX_GPU_MEMORY_MIB, description="GPU memory each replica pins; rounded up to 128 MiB (MPS)"
    )
    active_thread_percentage: int | None = Field(None, ge=1, le=100, description="share of the GPU's SMs (MPS)")
    max_concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, description="requests in flight per replica")
    rate_rps: float | None = Field(None, gt=0, description="requests per second (a token bucket)")
    tokens_per_second: float | None = Field(None, gt=0, description="generated tokens per second")


class QuotaPut(Quota):
    version: int | None = Field(None, description="the tenant version this edit is based on; 409 if it moved on")


class TenantIn(BaseModel):
    name: Name
    slo_class: SloClass = SloClass.STANDARD
    quotas: dict[Name, Quota] = Field(default_factory=dict, description="by pool")


class TenantPatch(BaseModel):
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


def _error(exc: Exception) -> HTTPException:
    """The store's refusals as answers: missing 404, stale or duplicate 409, cannot hold or invalid 422."""
    if isinstance(exc, LookupError):
        return HTTPException(status.HTTP_404_NOT_FOUND, str(exc))
    if isinstance(exc, VersionConflict | TenantExists):
        return HTTPException(status.HTTP_409_CONFLICT, str(exc))
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc))


@router.get("/tenants")
def list_tenants(store: StoreDep, _token: ViewerToken) -> TenantPage:
    return TenantPage(items=[_out(t) for t in store.list()])


@router.get("/tenants/{name}", responses={404: {}})
def get_tenant(name: str, store: StoreDep, _token: ViewerToken) -> TenantOut:
    tenant = store.get(name)
    if tenant is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no tenant {name!r}")
    return _out(tenant)


@router.post("/tenants", status_code=status.HTTP_201_CREATED, responses={409: {}, 422: {}})
def create_tenant(body: TenantIn, store: StoreDep, services: ServicesDep, _token: AdminToken) -> TenantOut:
    try:
        quotas = {pool: _spec(q) for pool, q in body.quotas.items()}
        return _out(store.create(body.name, body.slo_class, quotas, now=services.clock()))
    except (LookupError, ValueError) as exc:
        raise _error(exc) from None


@router.patch("/tenants/{name}", responses={404: {}, 409: {}, 422: {}})
def patch_tenant(
    name: str, body: TenantPatch, store: StoreDep, services: ServicesDep, _token: OperatorToken
) -> TenantOut:
    try:
        return _out(store.update(name, body.slo_class, now=services.clock(), expected_version=body.version))
    except (LookupError, ValueError) as exc:
        raise _error(exc) from None


@router.delete("/tenants/{name}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {}})
def delete_tenant(name: str, store: StoreDep, _token: AdminToken) -> Response:
    if not store.delete(name):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no tenant {name!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/tenants/{name}/quotas/{pool}", responses={404: {}, 409: {}, 422: {}})
def put_quota(
    name: str, pool: PoolInPath, body: QuotaPut, store: StoreDep, services: ServicesDep, _token: OperatorToken
) -> TenantOut:
    """Set the tenant's quota on ``pool`` (replacing any); the answer is the tenant with all its quotas."""
    try:
        tenant = store.put_quota(name, pool, _spec(body), now=services.clock(), expected_version=body.version)
    except (LookupError, ValueError) as exc:
        raise _error(exc) from None
    return _out(tenant)


@router.delete("/tenants/{name}/quotas/{pool}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {}})
def delete_quota(name: str, pool: str, store: StoreDep, services: ServicesDep, _token: OperatorToken) -> Response:
    try:
        store.delete_quota(name, pool, now=services.clock())
    except LookupError as exc:
        raise _error(exc) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)
