"""Every change made in the dashboard is audited exactly as the same change made through the REST API: one row with the
signed-in user's token as actor, the resource, the action, before and after (secrets never), and no row for a form
that is refused. The form actions call the API's own functions, so the two rows cannot drift (test_audit_parity.py
makes each change both ways and compares the rows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, select

from alerting.alert_store import SilenceStore
from alerting.silences import Matcher
from alerting.webhooks import TargetKind, WebhookStore
from fleet.pools import PoolSpec
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, TenantStore
from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import HOOK_URL, SECRET, User, rows
from web.services import AppServices
from web.tables import audit_log
from web.tokens import Role
from wire.control import SloClass


def everything_logged(engine: Engine) -> str:
    with engine.connect() as conn:
        return str([tuple(r) for r in conn.execute(select(audit_log))])


def contains(value: Any, subset: Any) -> bool:
    """``subset``'s keys (at any depth) have these values in ``value``; a non-dict compares equal."""
    if isinstance(subset, dict):
        return isinstance(value, dict) and all(k in value and contains(value[k], v) for k, v in subset.items())
    return bool(value == subset)


@pytest.fixture
def world(services: AppServices, clock: FakeClock) -> dict[str, str]:
    """What the forms act on, made through the stores (so not audited): the audit log starts empty."""
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=6), now=clock())
    TenantStore(services.engine).create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=10)}, now=clock())
    silence = SilenceStore(services.engine).create(
        [Matcher("pool", "chat")], starts_at=clock(), ends_at=clock() + 600, created_by="bob", comment="", now=clock()
    )
    bot, _clear = services.tokens.create(Role.VIEWER, now=clock(), name="bot")
    hook = WebhookStore(services.engine).create(HOOK_URL, SECRET, kind=TargetKind.WEBHOOK, name="oncall", now=clock())
    key, _clear = TenantKeyStore(services.engine).create("acme", now=clock(), name="checkout")
    assert rows(services.engine) == []
    return {"silence": silence.id, "token": bot.id, "webhook": hook.id, "key": key.id}


@dataclass(frozen=True)
class Form:
    role: str
    path: str  # "{silence}", "{token}", "{webhook}", "{key}": the world's ids
    data: dict[str, str]
    resource: str
    action: str
    resource_id: str  # "" when the server assigns it (then it is the after's id)
    before: dict[str, Any] | None
    after: dict[str, Any] | None = field(default=None)


# Every form action of the dashboard that changes something (login and logout change no resource).
FORMS = [
    Form(
        "operator",
        "/pools/chat/scale",
        {"replicas": "4", "reason": "launch"},
        "pool",
        "scale",
        "chat",
        {"manual": None, "version": 1},
        {"manual": {"replicas": 4, "reason": "alice: launch"}, "version": 2},
    ),
    Form(
        "operator",
        "/pools/chat/mode",
        {"mode": "dry_run", "version": "1"},
        "pool",
        "update",
        "chat",
        {"mode": "act", "version": 1},
        {"mode": "dry_run", "version": 2},
    ),
    Form(
        "operator",
        "/tenants/acme/quotas",
        {"pool": "chat", "rate_rps": "20", "version": "1"},
        "quota",
        "update",
        "acme/chat",
        {"quotas": {"chat": {"rate_rps": 10.0}}, "version": 1},
        {"quotas": {"chat": {"rate_rps": 20.0, "max_concurrency": None}}, "version": 2},
    ),
    Form(
        "operator",
        "/tenants/acme/class",
        {"slo_class": "batch", "version": "1"},
        "tenant",
        "update",
        "acme",
        {"slo_class": "standard"},
        {"slo_class": "batch", "version": 2},
    ),
    Form(
        "admin",
        "/tenants",
        {"name": "beta", "slo_class": "batch"},
        "tenant",
        "create",
        "beta",
        None,
        {"name": "beta", "slo_class": "batch", "quotas": {}, "version": 1},
    ),
    Form(
        "admin",
        "/tenants/acme/keys",
        {"name": "ci"},
        "tenant_key",
        "create",
        "",
        None,
        {"tenant": "acme", "name": "ci"},
    ),
    Form(
        "admin",
        "/tenants/acme/keys/{key}/revoke",
        {},
        "tenant_key",
        "delete",
        "{key}",
        {"tenant": "acme", "name": "checkout"},
    ),
    Form(
        "operator",
        "/silences",
        {"matchers": "alertname=GpuHot", "duration_minutes": "30", "comment": "swap"},
        "silence",
        "create",
        "",
        None,
        {"matchers": [{"name": "alertname", "value": "GpuHot", "op": "="}], "created_by": "alice", "active": True},
    ),
    Form(
        "operator",
        "/silences/{silence}/expire",
        {},
        "silence",
        "expire",
        "{silence}",
        {"active": True, "created_by": "bob"},
        {"active": False},
    ),
    Form(
        "admin",
        "/settings/tokens",
        {"role": "viewer", "name": "ci-bot"},
        "token",
        "create",
        "",
        None,
        {"name": "ci-bot", "role": "viewer", "node_id": None},
    ),
    Form(
        "admin", "/settings/tokens/{token}/revoke", {}, "token", "delete", "{token}", {"name": "bot", "role": "viewer"}
    ),
    Form(
        "admin",
        "/settings/webhooks",
        {"url": HOOK_URL, "secret": SECRET, "name": "pager"},
        "webhook",
        "create",
        "",
        None,
        {"name": "pager", "has_secret": True, "url": "https://***@hooks.example.com/x?key=***"},
    ),
    Form(
        "admin",
        "/settings/webhooks/{webhook}/delete",
        {},
        "webhook",
        "delete",
        "{webhook}",
        {"name": "oncall", "has_secret": True},
    ),
]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f.resource}-{f.action}-{f.path}")
def test_a_form_writes_one_row_with_the_dashboard_user_as_actor(
    form: Form, world: dict[str, str], signed_in: Callable[[str], User], services: AppServices, clock: FakeClock
) -> None:
    user = signed_in(form.role)
    clock.advance(5)
    answer = user.submit(form.path.format(**world), form.data)
    assert answer.status_code in (200, 201), answer.text
    (row,) = rows(services.engine)
    assert (row.actor_id, row.actor_name, row.actor_role) == (user.info.id, "alice", form.role)
    assert (row.resource, row.action, row.ts) == (form.resource, form.action, clock())
    expected_id = form.resource_id.format(**world) or row.after["id"]
    assert row.resource_id == expected_id
    assert (row.before is None) == (form.before is None) and contains(row.before, form.before), row.before
    assert (row.after is None) == (form.after is None) and contains(row.after, form.after), row.after
    logged = everything_logged(services.engine)
    assert SECRET not in logged and "pw@" not in logged and user.clear not in logged
    assert "token_hash" not in logged and "'token':" not in logged


@dataclass(frozen=True)
class Refusal:
    role: str
    path: str
    data: dict[str, str]
    status_code: int
    says: str  # what the answer says (HTML-escaped as the page shows it)


# Each form refused, by validation, by the store, by a stale version, by a missing resource or by the role check.
REFUSALS = [
    Refusal("operator", "/pools/chat/scale", {"replicas": "40"}, 422, "outside the pool&#39;s range 1..6"),
    Refusal("operator", "/pools/chat/scale", {"replicas": "many"}, 422, "replicas:"),
    Refusal("operator", "/pools/chat/scale", {"replicas": "2", "version": "7"}, 422, "is at version 1"),
    Refusal("operator", "/pools/ghost/scale", {"replicas": "2"}, 404, "no pool &#39;ghost&#39;"),
    Refusal("operator", "/pools/chat/mode", {"mode": "sideways"}, 422, "mode:"),
    Refusal("operator", "/pools/chat/mode", {"mode": "dry_run", "version": "7"}, 422, "re-read it"),
    Refusal("viewer", "/pools/chat/scale", {"replicas": "2"}, 403, "needs the operator role"),
    Refusal("operator", "/tenants/acme/quotas", {"pool": "chat", "rate_rps": "-1"}, 422, "rate_rps:"),
    Refusal("operator", "/tenants/acme/quotas", {"pool": "chat", "rate_rps": "5", "version": "7"}, 422, "re-read it"),
    Refusal("operator", "/tenants/acme/quotas", {"pool": "no pool!", "rate_rps": "5"}, 422, "is not a pool name"),
    Refusal("operator", "/tenants/ghost/quotas", {"pool": "chat", "rate_rps": "5"}, 404, "no tenant &#39;ghost&#39;"),
    Refusal("operator", "/tenants/ghost/class", {"slo_class": "batch"}, 404, "no tenant &#39;ghost&#39;"),
    Refusal("operator", "/tenants/acme/class", {"slo_class": "gold"}, 422, "slo_class:"),
    Refusal("operator", "/tenants/acme/class", {"slo_class": "batch", "version": "7"}, 422, "re-read it"),
    Refusal("admin", "/tenants", {"name": "acme", "slo_class": "batch"}, 422, "already exists"),
    Refusal("admin", "/tenants", {"name": "no name!", "slo_class": "batch"}, 422, "name:"),
    Refusal("operator", "/tenants", {"name": "beta", "slo_class": "batch"}, 403, "needs the admin role"),
    Refusal("admin", "/tenants/acme/keys", {"name": "x" * 256}, 422, "name:"),
    Refusal("admin", "/tenants/ghost/keys", {}, 404, "no tenant &#39;ghost&#39;"),
    Refusal("admin", "/tenants/acme/keys/ghost/revoke", {}, 404, "has no key &#39;ghost&#39;"),
    Refusal("operator", "/tenants/acme/keys", {"name": "mine"}, 403, "needs the admin role"),
    Refusal("viewer", "/tenants/acme/keys/{key}/revoke", {}, 403, "needs the admin role"),
    Refusal("operator", "/silences", {"matchers": "no matcher here"}, 422, "is not NAME=VALUE"),
    Refusal("operator", "/silences", {"matchers": "pool=chat", "duration_minutes": "-5"}, 422, "duration_seconds"),
    Refusal("operator", "/silences/ghost/expire", {}, 422, "no silence &#39;ghost&#39;"),
    Refusal("admin", "/settings/tokens", {"role": "agent"}, 422, "node_id"),
    Refusal("admin", "/settings/tokens/ghost/revoke", {}, 404, "no token &#39;ghost&#39;"),
    Refusal("admin", "/settings/webhooks", {"url": "ftp://x", "secret": SECRET}, 422, "scheme must be http"),
    Refusal("admin", "/settings/webhooks", {"url": "https://h.example.com/x", "secret": "short"}, 422, "secret"),
    Refusal("admin", "/settings/webhooks/ghost/delete", {}, 404, "no webhook &#39;ghost&#39;"),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: f"{r.path}-{r.status_code}-{r.says[:16]}")
def test_a_refused_form_writes_no_row(
    refusal: Refusal, world: dict[str, str], signed_in: Callable[[str], User], services: AppServices
) -> None:
    answer = signed_in(refusal.role).submit(refusal.path.format(**world), refusal.data)
    assert answer.status_code == refusal.status_code and refusal.says in answer.text, answer.text
    assert rows(services.engine) == []


def test_a_form_without_its_csrf_token_writes_no_row(
    world: dict[str, str], signed_in: Callable[[str], User], services: AppServices
) -> None:
    answer = signed_in("operator").submit("/pools/chat/scale", {"replicas": "2"}, csrf=False)
    assert answer.status_code == 403 and rows(services.engine) == []
