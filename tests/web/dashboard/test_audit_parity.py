"""The same change made through the REST API and through the dashboard is audited alike: each form action calls the
API's own function, and this proves the rows agree by making every change both ways, on twin resources, with one
token at one instant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from alerting.alert_store import SilenceStore
from alerting.silences import Matcher
from alerting.webhooks import TargetKind, WebhookStore
from fleet.pools import PoolSpec
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, TenantStore
from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import HOOK_URL, SECRET, User, rows
from web.changes.audit import AuditEntry
from web.services import AppServices
from web.tokens import Role
from wire.control import SloClass


def _twin_pools(services: AppServices, clock: FakeClock) -> tuple[str, str]:
    for name in ("api-twin", "form-twin"):
        services.pools.create(name, PoolSpec(min_replicas=1, max_replicas=6), now=clock())
    return "api-twin", "form-twin"


def _twin_tenants(services: AppServices, clock: FakeClock) -> tuple[str, str]:
    services.pools.create("chat", PoolSpec(), now=clock())
    for name in ("api-twin", "form-twin"):
        TenantStore(services.engine).create(name, SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=10)}, now=clock())
    return "api-twin", "form-twin"


def _twin_silences(services: AppServices, clock: FakeClock) -> tuple[str, str]:
    store = SilenceStore(services.engine)
    made = [
        store.create(
            [Matcher("pool", "chat")], starts_at=clock(), ends_at=clock() + 60, created_by="b", comment="", now=clock()
        )
        for _ in range(2)
    ]
    return made[0].id, made[1].id


def _twin_tokens(services: AppServices, clock: FakeClock) -> tuple[str, str]:
    made = [services.tokens.create(Role.VIEWER, now=clock(), name="bot")[0] for _ in range(2)]
    return made[0].id, made[1].id


def _twin_hooks(services: AppServices, clock: FakeClock) -> tuple[str, str]:
    store = WebhookStore(services.engine)
    made = [store.create(HOOK_URL, SECRET, kind=TargetKind.WEBHOOK, name="oncall", now=clock()) for _ in range(2)]
    return made[0].id, made[1].id


def _twin_tenant_keys(services: AppServices, clock: FakeClock) -> tuple[str, str]:
    """A key of each twin tenant, named by its path below the tenant: ``api-twin/keys/<id>``."""
    api_twin, form_twin = _twin_tenants(services, clock)
    store = TenantKeyStore(services.engine)
    api_key, form_key = (store.create(name, now=clock(), name="checkout")[0] for name in (api_twin, form_twin))
    return f"{api_twin}/keys/{api_key.id}", f"{form_twin}/keys/{form_key.id}"


def _new_names(_services: AppServices, _clock: FakeClock) -> tuple[str, str]:
    return "api-twin", "form-twin"


@dataclass(frozen=True)
class Pair:
    """One change made through the API on one twin and through the dashboard on the other."""

    role: str
    twins: Callable[[AppServices, FakeClock], tuple[str, str]]
    method: str
    api_path: str  # "{id}": the API's twin
    body: dict[str, Any] | None
    form_path: str  # "{id}": the dashboard's twin
    form: dict[str, str]


SILENCE = {"matchers": [{"name": "alertname", "value": "GpuHot"}], "duration_seconds": 1800, "comment": "swap"}
PAIRS = [
    Pair(
        "operator",
        _twin_pools,
        "POST",
        "/api/v1/pools/{id}/scale",
        {"replicas": 4, "reason": "launch"},
        "/pools/{id}/scale",
        {"replicas": "4", "reason": "launch"},
    ),
    Pair(
        "operator",
        _twin_pools,
        "PATCH",
        "/api/v1/pools/{id}",
        {"mode": "dry_run"},
        "/pools/{id}/mode",
        {"mode": "dry_run"},
    ),
    Pair(
        "operator",
        _twin_tenants,
        "PUT",
        "/api/v1/tenants/{id}/quotas/chat",
        {"rate_rps": 20, "max_concurrency": 4},
        "/tenants/{id}/quotas",
        {"pool": "chat", "rate_rps": "20", "max_concurrency": "4"},
    ),
    Pair(
        "operator",
        _twin_tenants,
        "PATCH",
        "/api/v1/tenants/{id}",
        {"slo_class": "batch"},
        "/tenants/{id}/class",
        {"slo_class": "batch"},
    ),
    Pair(
        "admin",
        _new_names,
        "POST",
        "/api/v1/tenants",
        {"name": "{id}", "slo_class": "batch"},
        "/tenants",
        {"name": "{id}", "slo_class": "batch"},
    ),
    Pair(
        "admin",
        _twin_tenants,
        "POST",
        "/api/v1/tenants/{id}/keys",
        {"name": "checkout"},
        "/tenants/{id}/keys",
        {"name": "checkout"},
    ),
    Pair("admin", _twin_tenant_keys, "DELETE", "/api/v1/tenants/{id}", None, "/tenants/{id}/revoke", {}),
    Pair(
        "operator",
        _new_names,
        "POST",
        "/api/v1/silences",
        SILENCE,
        "/silences",
        {"matchers": "alertname=GpuHot", "duration_minutes": "30", "comment": "swap"},
    ),
    Pair("operator", _twin_silences, "DELETE", "/api/v1/silences/{id}", None, "/silences/{id}/expire", {}),
    Pair(
        "admin",
        _new_names,
        "POST",
        "/api/v1/tokens",
        {"role": "operator", "name": "ci-bot"},
        "/settings/tokens",
        {"role": "operator", "name": "ci-bot"},
    ),
    Pair("admin", _twin_tokens, "DELETE", "/api/v1/tokens/{id}", None, "/settings/tokens/{id}/revoke", {}),
    Pair(
        "admin",
        _new_names,
        "POST",
        "/api/v1/webhooks",
        {"url": HOOK_URL, "secret": SECRET, "name": "pager"},
        "/settings/webhooks",
        {"url": HOOK_URL, "secret": SECRET, "name": "pager"},
    ),
    Pair("admin", _twin_hooks, "DELETE", "/api/v1/webhooks/{id}", None, "/settings/webhooks/{id}/delete", {}),
]


def _filled(value: Any, twin: str) -> Any:
    if isinstance(value, dict):
        return {k: _filled(v, twin) for k, v in value.items()}
    return value.replace("{id}", twin) if isinstance(value, str) else value


def _as_seen(row: AuditEntry, twin: str) -> tuple[Any, ...]:
    """The row with its twin's name (and the tenant a ``tenant/keys/<id>`` twin is below), its own id (a silence's,
    token's, webhook's or tenant key's) and a tenant key's random prefix written as ``<twin>``."""
    shown = [d["prefix"] for d in (row.before, row.after) if isinstance(d, dict) and "prefix" in d]
    own = {twin, twin.partition("/")[0], row.resource_id, *shown}

    def swap(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return "<twin>" if isinstance(value, str) and value in own else value

    return (row.resource, row.action, row.actor_id, row.actor_role, swap(row.before), swap(row.after))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p.method}-{p.api_path}")
def test_the_api_and_the_dashboard_audit_a_change_alike(
    pair: Pair, signed_in: Callable[[str], User], services: AppServices, clock: FakeClock
) -> None:
    """The same token acts both ways at the same instant, so the two rows differ only in the twin they changed."""
    api_twin, form_twin = pair.twins(services, clock)
    user = signed_in(pair.role)
    api = user.client.request(
        pair.method,
        pair.api_path.replace("{id}", api_twin),
        json=_filled(pair.body, api_twin),
        headers={"Authorization": f"Bearer {user.clear}"},
    )
    assert api.status_code in (200, 201, 204), api.text
    form = user.submit(pair.form_path.replace("{id}", form_twin), _filled(pair.form, form_twin))
    assert form.status_code in (200, 201), form.text
    by_api, by_form = rows(services.engine)
    assert by_api.resource_id != by_form.resource_id
    assert _as_seen(by_api, api_twin) == _as_seen(by_form, form_twin)
    assert by_form.actor_id == user.info.id
