"""Tenant key changes (admin): create a key of a tenant, its clear text answered once and never audited, and revoke
one. The nodes hear of either at their next push."""

from __future__ import annotations

from isolation.tenant_keys import TenantKey, TenantKeyStore
from isolation.tenants import TenantNotFound
from web.changes.audit import Auditor, Publish
from web.errors import not_found
from web.schemas.tenant_keys import TenantKeyIn, tenant_key_out


def apply_tenant_key_create(
    audit: Auditor, tenant: str, body: TenantKeyIn, *, now: float, publish: Publish
) -> tuple[TenantKey, str]:
    """Create a key of ``tenant``, audited as ("tenant_key", "create") without its secret; answers the key and its
    clear text, which the caller shows once. The key works on the nodes from their next push (``publish``)."""
    try:
        with audit.change("tenant_key", "create", publish=publish) as change:
            key, clear = TenantKeyStore(change.engine).create(tenant, now=now, name=body.name)
            change.resource_id, change.after = key.id, tenant_key_out(key)
    except TenantNotFound as exc:
        raise not_found(str(exc)) from None
    return key, clear


def apply_tenant_key_delete(audit: Auditor, tenant: str, key_id: str, *, publish: Publish) -> None:
    """Revoke a key, audited as ("tenant_key", "delete"); agents refuse it from their next push on (``publish``)."""
    with audit.change("tenant_key", "delete", key_id, publish=publish) as change:
        store = TenantKeyStore(change.engine)
        before = store.get(tenant, key_id)
        if before is None or not store.delete(tenant, key_id):
            raise not_found(f"tenant {tenant!r} has no key {key_id!r}")
        change.before = tenant_key_out(before)
