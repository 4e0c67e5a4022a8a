"""``/api/v1/tenants/{name}/keys``: admins create, list and revoke the API keys tenants present to the serving API.

A key's clear text is answered once, by the POST that creates it; the store and the agents keep only its SHA-256
digest, and listings show its first characters (``prefix``) to tell keys apart. Every change is audited as
("tenant_key", create | delete) without the secret.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field

from isolation.tenant_keys import TenantKey, TenantKeyStore
from isolation.tenants import TenantNotFound
from web.audit import Auditor, AuditorDep
from web.auth import AdminToken, ServicesDep
from web.errors import ERROR_RESPONSES, error_responses, not_found, refused
from web.routes.tenants import Publish

router = APIRouter(tags=["tenants"], responses=ERROR_RESPONSES)


class TenantKeyIn(BaseModel):
    model_config = {"json_schema_extra": {"examples": [{"name": "checkout-service"}]}}

    name: str = Field("", max_length=255, description="a label to tell keys apart (default key-<id>)")


class TenantKeyOut(BaseModel):
    id: str
    tenant: str
    name: str
    prefix: str = Field(description="the key's first characters, to recognise it; never the whole key")
    created_at: float


class NewTenantKeyOut(TenantKeyOut):
    key: str = Field(description="the key itself, shown this once: send it as Authorization: Bearer <key>")


class TenantKeyPage(BaseModel):
    items: list[TenantKeyOut]
    next: str | None = None


def _out(key: TenantKey) -> TenantKeyOut:
    return TenantKeyOut(id=key.id, tenant=key.tenant, name=key.name, prefix=key.prefix, created_at=key.created_at)


@router.get("/tenants/{name}/keys", responses=error_responses(404))
def list_tenant_keys(name: str, services: ServicesDep, _token: AdminToken) -> TenantKeyPage:
    try:
        return TenantKeyPage(items=[_out(k) for k in TenantKeyStore(services.engine).list(name)])
    except TenantNotFound as exc:
        raise not_found(str(exc)) from None


def apply_tenant_key_create(
    audit: Auditor, tenant: str, body: TenantKeyIn, *, now: float, publish: Publish
) -> tuple[TenantKey, str]:
    """Create a key of ``tenant``, audited as ("tenant_key", "create") without its secret; answers the key and its
    clear text, which the caller shows once. The key works on the nodes from their next push (``publish``)."""
    try:
        with audit.change("tenant_key", "create") as change:
            key, clear = TenantKeyStore(change.engine).create(tenant, now=now, name=body.name)
            change.resource_id, change.after = key.id, _out(key)
    except TenantNotFound as exc:
        raise not_found(str(exc)) from None
    except ValueError as exc:
        raise refused(exc) from None
    publish()
    return key, clear


@router.post("/tenants/{name}/keys", status_code=status.HTTP_201_CREATED, responses=error_responses(404))
def create_tenant_key(
    name: str, services: ServicesDep, _token: AdminToken, audit: AuditorDep, body: TenantKeyIn | None = None
) -> NewTenantKeyOut:
    """The answer's ``key`` is the only time the secret is shown; the audit log keeps the key without it."""
    key, clear = apply_tenant_key_create(
        audit, name, body or TenantKeyIn(), now=services.clock(), publish=services.publish_tenants
    )
    return NewTenantKeyOut(**_out(key).model_dump(), key=clear)


def apply_tenant_key_delete(audit: Auditor, tenant: str, key_id: str, *, publish: Publish) -> None:
    """Revoke a key, audited as ("tenant_key", "delete"); agents refuse it from their next push on (``publish``)."""
    with audit.change("tenant_key", "delete", key_id) as change:
        store = TenantKeyStore(change.engine)
        before = store.get(tenant, key_id)
        if before is None or not store.delete(tenant, key_id):
            raise not_found(f"tenant {tenant!r} has no key {key_id!r}")
        change.before = _out(before)
    publish()


@router.delete("/tenants/{name}/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def delete_tenant_key(name: str, key_id: str, services: ServicesDep, _token: AdminToken, audit: AuditorDep) -> Response:
    apply_tenant_key_delete(audit, name, key_id, publish=services.publish_tenants)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
