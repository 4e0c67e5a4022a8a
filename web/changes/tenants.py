"""Tenant changes: create and delete a tenant (admin), change its SLO class and set or remove its quota on a pool
(operator). Each is audited with the tenant as the API shows it before and after, goes ahead only while the tenant
is at the version ``If-Match`` names (else 412), and is published to the nodes once committed. A quota that cannot
hold with the pool's other tenants is refused 422 naming its field, and nothing is stored.
"""

from __future__ import annotations

from isolation.tenants import QuotaSpec, Tenant, TenantStore
from web.changes.audit import Auditor, Publish, existing
from web.errors import refusals
from web.schemas.tenants import Quota, QuotaPut, TenantIn, TenantPatch, tenant_out


def _spec(quota: Quota) -> QuotaSpec:
    return QuotaSpec(**quota.model_dump(include=set(Quota.model_fields)))


def _audited(tenant: Tenant | None) -> dict[str, object] | None:
    return None if tenant is None else tenant_out(tenant).model_dump(mode="json")


def apply_tenant_create(audit: Auditor, body: TenantIn, *, now: float, publish: Publish) -> Tenant:
    """Create a tenant, audited as ("tenant", "create"): the API's POST and the dashboard's new-tenant form. Then
    ``publish`` (``AppServices.publish_tenants``): the nodes are told at their next push."""
    with refusals():
        quotas = {pool: _spec(q) for pool, q in body.quotas.items()}
    with audit.change("tenant", "create", body.name, publish=publish) as change:
        tenant = TenantStore(change.engine).create(body.name, body.slo_class, quotas, now=now)
        change.after = _audited(tenant)
    return tenant


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
    with audit.change("tenant", "update", name, publish=publish) as change:
        store = TenantStore(change.engine)
        before = existing(store.get(name), f"tenant {name!r}", if_match)
        tenant = store.update(name, body.slo_class, now=now, expected_version=body.version)
        change.before, change.after = _audited(before), _audited(tenant)
    return tenant


def apply_tenant_delete(audit: Auditor, name: str, *, publish: Publish, if_match: frozenset[int] | None = None) -> None:
    """Delete a tenant, audited as ("tenant", "delete"); the last tenant gone, the nodes get an empty part, nothing
    limited any more."""
    with audit.change("tenant", "delete", name, publish=publish) as change:
        store = TenantStore(change.engine)
        before = existing(store.get(name), f"tenant {name!r}", if_match)
        store.delete(name)
        change.before = _audited(before)


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
    with audit.change("quota", "update", f"{name}/{pool}", publish=publish) as change:
        store = TenantStore(change.engine)
        before = existing(store.get(name), f"tenant {name!r}", if_match)
        tenant = store.put_quota(name, pool, _spec(body), now=now, expected_version=body.version)
        change.before, change.after = _audited(before), _audited(tenant)
    return tenant


def apply_quota_delete(
    audit: Auditor, name: str, pool: str, *, now: float, publish: Publish, if_match: frozenset[int] | None = None
) -> None:
    """Remove the tenant's quota on ``pool``, audited as ("quota", "delete")."""
    with audit.change("quota", "delete", f"{name}/{pool}", publish=publish) as change:
        store = TenantStore(change.engine)
        before = existing(store.get(name), f"tenant {name!r}", if_match)
        tenant = store.delete_quota(name, pool, now=now)
        change.before, change.after = _audited(before), _audited(tenant)
