"""``/api/v1/tenants``: read tenants (viewer), edit their class and quotas (operator), create and delete them (admin).

A quota that cannot hold with the other tenants of its pool is refused with 422 naming the field and by how much,
and nothing is stored. A GET answers the tenant's ``ETag``; an edit of the tenant or of one of its quotas with
``If-Match`` goes ahead only while the tenant is still at that version (else 412); a body ``version`` still works
(409 when the tenant changed since). Every change is audited (``web.changes.tenants``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response, status

from isolation.tenants import Tenant, TenantStore
from web.auth import AdminToken, OperatorToken, ServicesDep, ViewerToken
from web.changes.audit import AuditorDep, existing
from web.changes.tenants import (
    apply_quota_delete,
    apply_quota_put,
    apply_tenant_create,
    apply_tenant_delete,
    apply_tenant_patch,
)
from web.errors import ERROR_RESPONSES, error_responses
from web.etags import IfMatch, tag
from web.schemas.tenants import QuotaPut, TenantIn, TenantOut, TenantPage, TenantPatch, tenant_out
from wire.control import NAME_PATTERN

router = APIRouter(tags=["tenants"], responses=ERROR_RESPONSES)

PoolInPath = Annotated[str, Path(pattern=NAME_PATTERN)]


def _store(services: ServicesDep) -> TenantStore:
    return TenantStore(services.engine)


StoreDep = Annotated[TenantStore, Depends(_store)]


def _answer(tenant: Tenant, response: Response) -> TenantOut:
    tag(response, tenant.version)
    return tenant_out(tenant)


@router.get("/tenants")
def list_tenants(store: StoreDep, _token: ViewerToken) -> TenantPage:
    return TenantPage(items=[tenant_out(t) for t in store.list()])


@router.get("/tenants/{name}", responses=error_responses(404))
def get_tenant(name: str, store: StoreDep, _token: ViewerToken, response: Response) -> TenantOut:
    return _answer(existing(store.get(name), f"tenant {name!r}"), response)


@router.post("/tenants", status_code=status.HTTP_201_CREATED, responses=error_responses(404, 409))
def create_tenant(
    body: TenantIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep, response: Response
) -> TenantOut:
    return _answer(apply_tenant_create(audit, body, now=services.clock(), publish=services.publish_tenants), response)


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
    apply_tenant_delete(audit, name, publish=services.publish_tenants, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


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
    apply_quota_delete(audit, name, pool, now=services.clock(), publish=services.publish_tenants, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
