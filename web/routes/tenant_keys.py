"""``/api/v1/tenants/{name}/keys``: admins create, list and revoke the API keys tenants present to the serving API.

A key's clear text is answered once, by the POST that creates it; the store and the agents keep only its SHA-256
digest, and listings show its first characters (``prefix``) to tell keys apart. Every change is audited as
("tenant_key", create | delete) without the secret (``web.changes.tenant_keys``).
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import TenantNotFound
from web.auth import AdminToken, ServicesDep
from web.changes.audit import AuditorDep
from web.changes.tenant_keys import apply_tenant_key_create, apply_tenant_key_delete
from web.errors import ERROR_RESPONSES, error_responses, not_found
from web.schemas.tenant_keys import NewTenantKeyOut, TenantKeyIn, TenantKeyPage, tenant_key_out

router = APIRouter(tags=["tenants"], responses=ERROR_RESPONSES)


@router.get("/tenants/{name}/keys", responses=error_responses(404))
def list_tenant_keys(name: str, services: ServicesDep, _token: AdminToken) -> TenantKeyPage:
    try:
        return TenantKeyPage(items=[tenant_key_out(k) for k in TenantKeyStore(services.engine).list(name)])
    except TenantNotFound as exc:
        raise not_found(str(exc)) from None


@router.post("/tenants/{name}/keys", status_code=status.HTTP_201_CREATED, responses=error_responses(404))
def create_tenant_key(
    name: str, services: ServicesDep, _token: AdminToken, audit: AuditorDep, body: TenantKeyIn | None = None
) -> NewTenantKeyOut:
    """The answer's ``key`` is the only time the secret is shown; the audit log keeps the key without it."""
    key, clear = apply_tenant_key_create(
        audit, name, body or TenantKeyIn(), now=services.clock(), publish=services.publish_tenants
    )
    return NewTenantKeyOut(**tenant_key_out(key).model_dump(), key=clear)


@router.delete("/tenants/{name}/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def delete_tenant_key(name: str, key_id: str, services: ServicesDep, _token: AdminToken, audit: AuditorDep) -> Response:
    apply_tenant_key_delete(audit, name, key_id, publish=services.publish_tenants)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
