"""The audit log: every mutating API route writes one row (who, what, before, after, when, request id) in the same
transaction as its change, secrets never; ``GET /api/v1/audit`` filters and pages them for admins."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from tests.support.clock import FakeClock
from web.changes.audit import AuditEntry, AuditLog, JoinedEngine, redacted
from web.services import AppServices
from web.tables import audit_log
from web.tokens import Role

Auth = Callable[..., dict[str, str]]
SECRET = "s3cret-signing-key-of-enough-length"
RULE = {"name": "hot", "kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": 85}


@dataclass(frozen=True)
class Step:
    method: str
    path: str  # "{id}" is the resource id of the last row with this resource
    body: dict[str, Any] | None
    role: str
    resource: str
    action: str
    resource_id: str | None  # None: assigned by the server (read from the answer)


# One pass through every mutating route of the API (ingest stores samples, not configuration: it is not audited).
STEPS = [
    Step("POST", "/api/v1/pools", {"name": "chat", "max_replicas": 6}, "admin", "pool", "create", "chat"),
    Step("PATCH", "/api/v1/pools/{name}", {"max_replicas": 8}, "operator", "pool", "update", "chat"),
    Step(
        "POST", "/api/v1/pools/{name}/scale", {"replicas": 2, "reason": "launch"}, "operator", "pool", "scale", "chat"
    ),
    Step("POST", "/api/v1/tenants", {"name": "acme"}, "admin", "tenant", "create", "acme"),
    Step("PATCH", "/api/v1/tenants/{name}", {"slo_class": "batch"}, "operator", "tenant", "update", "acme"),
    Step(
        "PUT",
        "/api/v1/tenants/{name}/quotas/{pool}",
        {"max_concurrency": 4},
        "operator",
        "quota",
        "update",
        "acme/chat",
    ),
    Step("DELETE", "/api/v1/tenants/{name}/quotas/{pool}", None, "operator", "quota", "delete", "acme/chat"),
    Step("POST", "/api/v1/tenants/{name}/keys", {"name": "checkout"}, "admin", "tenant_key", "create", None),
    Step("DELETE", "/api/v1/tenants/{name}/keys/{key_id}", None, "admin", "tenant_key", "delete", None),
    Step("DELETE", "/api/v1/tenants/{name}", None, "admin", "tenant", "delete", "acme"),
    Step("POST", "/api/v1/tokens", {"role": "viewer", "name": "grafana"}, "admin", "token", "create", None),
    Step("DELETE", "/api/v1/tokens/{token_id}", None, "admin", "token", "delete", None),
    Step("POST", "/api/v1/alert-rules", RULE, "operator", "alert_rule", "create", None),
    Step("PATCH", "/api/v1/alert-rules/{rule_id}", {"threshold": 90}, "operator", "alert_rule", "update", None),
    Step("DELETE", "/api/v1/alert-rules/{rule_id}", None, "operator", "alert_rule", "delete", None),
    Step(
        "POST",
        "/api/v1/silences",
        {"matchers": [{"name": "pool", "value": "chat"}], "duration_seconds": 600},
        "operator",
        "silence",
        "create",
        None,
    ),
    Step("DELETE", "/api/v1/silences/{silence_id}", None, "operator", "silence", "expire", None),
    Step(
        "POST",
        "/api/v1/webhooks",
        {"url": "https://user:pw@hooks.example.com/x?key=k", "secret": SECRET},
        "admin",
        "webhook",
        "create",
        None,
    ),
    Step("DELETE", "/api/v1/webhooks/{webhook_id}", None, "admin", "webhook", "delete", None),
    Step("DELETE", "/api/v1/pools/{name}", None, "admin", "pool", "delete", "chat"),
]


def rows(engine: Engine) -> list[AuditEntry]:
    return list(reversed(AuditLog(engine).list(limit=1000)))


def _fill(path: str, ids: dict[str, str]) -> str:
    values = {"name": ids.get("pool_or_tenant", ""), "pool": "chat", "key_id": ids.get("tenant_key_id", ""), **ids}
    for key, value in values.items():
        path = path.replace("{" + key + "}", value)
    return path


# what agents and a team's Prometheus send: data, not changes an operator makes (never audited)
MACHINE_PATHS = {"/api/v1/ingest", "/api/v1/write", "/api/v1/otlp/v1/metrics"}


def test_every_mutating_route_writes_one_row_with_who_what_before_after_and_the_request_id(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    callers = {role: auth(role) for role in ("admin", "operator")}
    ids: dict[str, str] = {}
    for n, step in enumerate(STEPS):
        clock.advance(1)
        ids["pool_or_tenant"] = "acme" if "tenants" in step.path else "chat"
        answer = client.request(
            step.method, _fill(step.path, ids), json=step.body, headers={**callers[step.role], "X-Request-ID": f"r{n}"}
        )
        assert answer.status_code in (200, 201, 204), (step, answer.text)
        written = rows(engine)
        assert len(written) == n + 1, step
        row = written[-1]
        if step.resource_id is None and step.method == "POST":
            ids[f"{'rule' if step.resource == 'alert_rule' else step.resource}_id"] = str(answer.json()["id"])
        expected_id = step.resource_id or ids[f"{'rule' if step.resource == 'alert_rule' else step.resource}_id"]
        assert (row.resource, row.action, row.resource_id) == (step.resource, step.action, expected_id)
        assert (row.actor_role, row.request_id, row.ts) == (step.role, f"r{n}", clock())
        assert (row.before is None) == (step.action == "create"), step
        assert (row.after is None) == (step.action == "delete" and step.resource != "quota"), step
    mutating = {
        (method.upper(), path)
        for path, ops in client.get("/openapi.json").json()["paths"].items()
        for method in ops
        if method != "get" and path not in MACHINE_PATHS
    }
    assert mutating == {(s.method, s.path) for s in STEPS}, "a mutating route this test does not audit"


def test_before_and_after_show_the_change_and_never_a_secret(client: TestClient, auth: Auth, engine: Engine) -> None:
    admin, operator = auth("admin"), auth("operator")
    client.post("/api/v1/pools", json={"name": "chat", "max_replicas": 6}, headers=admin)
    client.patch("/api/v1/pools/chat", json={"max_replicas": 8}, headers=operator)
    created = client.post("/api/v1/tokens", json={"role": "viewer"}, headers=admin).json()
    client.post("/api/v1/webhooks", json={"url": "https://u:pw@h.example.com/x", "secret": SECRET}, headers=admin)
    pool_edit, token, hook = rows(engine)[1:]
    assert (pool_edit.before["max_replicas"], pool_edit.after["max_replicas"]) == (6, 8)
    assert (pool_edit.before["version"], pool_edit.after["version"]) == (1, 2)
    assert pool_edit.actor_role == "operator" and pool_edit.actor_name.startswith("operator-")
    assert token.after["id"] == created["id"] and "token" not in token.after
    assert hook.after["has_secret"] is True
    with engine.connect() as conn:
        everything = str([tuple(r) for r in conn.execute(select(audit_log))])
    assert created["token"] not in everything and SECRET not in everything and "pw@" not in everything


def test_redacted_masks_secrets_at_any_depth() -> None:
    value = {"name": "x", "secret": "s", "nested": [{"token": "t", "token_hash": "h", "keep": 1}], "password": None}
    assert redacted(value) == {
        "name": "x",
        "secret": "***",
        "nested": [{"token": "***", "token_hash": "***", "keep": 1}],
        "password": None,
    }


def test_a_refused_change_writes_no_row(client: TestClient, auth: Auth, engine: Engine) -> None:
    admin = auth("admin")
    client.post("/api/v1/pools", json={"name": "chat"}, headers=admin)
    assert client.post("/api/v1/pools", json={"name": "chat"}, headers=admin).status_code == 409
    assert client.patch("/api/v1/pools/chat", json={"min_replicas": 50}, headers=admin).status_code == 422
    assert (
        client.patch("/api/v1/pools/chat", json={"min_replicas": 2}, headers={**admin, "If-Match": '"4"'}).status_code
        == 412
    )
    assert client.delete("/api/v1/pools/ghost", headers=admin).status_code == 404
    assert client.delete("/api/v1/webhooks/ghost", headers=admin).status_code == 404
    assert [(r.resource, r.action) for r in rows(engine)] == [("pool", "create")]


def test_the_change_and_its_row_share_one_transaction(engine: Engine, clock: FakeClock) -> None:
    """A failure after the store's write (here: writing the row itself) takes the change back too."""
    from fleet.pools import PoolSpec, PoolStore

    with pytest.raises(RuntimeError), engine.begin() as conn:
        PoolStore(JoinedEngine(conn)).create("chat", PoolSpec(), now=clock())  # type: ignore[arg-type]
        raise RuntimeError("the audit row could not be written")
    assert PoolStore(engine).get("chat") is None


def test_audit_lists_newest_first_with_filters_and_pages_for_admins_only(
    client: TestClient, auth: Auth, services: AppServices, clock: FakeClock
) -> None:
    admin = auth("admin")
    operator_info, operator_clear = services.tokens.create(Role.OPERATOR, now=clock(), name="alice")
    operator = {"Authorization": f"Bearer {operator_clear}"}
    for name in ("a", "b", "c"):
        clock.advance(10)
        client.post("/api/v1/pools", json={"name": name}, headers=admin)
    clock.advance(10)
    client.patch("/api/v1/pools/a", json={"max_replicas": 3}, headers=operator)
    listed = client.get("/api/v1/audit", headers=admin).json()
    assert [(i["resource_id"], i["action"]) for i in listed["items"]] == [
        ("a", "update"),
        ("c", "create"),
        ("b", "create"),
        ("a", "create"),
    ]
    assert listed["items"][0]["actor"] == {"id": operator_info.id, "name": "alice", "role": "operator"}
    by_alice = client.get("/api/v1/audit", params={"actor": "alice"}, headers=admin).json()["items"]
    assert [i["action"] for i in by_alice] == ["update"]
    since = client.get("/api/v1/audit", params={"since": clock() - 15}, headers=admin).json()["items"]
    assert [i["resource_id"] for i in since] == ["a", "c"]
    assert client.get("/api/v1/audit", params={"resource": "tenant"}, headers=admin).json()["items"] == []
    first = client.get("/api/v1/audit", params={"limit": 3}, headers=admin).json()
    rest = client.get("/api/v1/audit", params={"limit": 3, "cursor": first["next"]}, headers=admin).json()
    assert [i["resource_id"] for i in rest["items"]] == ["a"] and rest["next"] is None
    assert client.get("/api/v1/audit", headers=operator).status_code == 403


def test_audit_rows_count_once_per_change_under_repeated_edits(client: TestClient, auth: Auth, engine: Engine) -> None:
    admin = auth("admin")
    client.post("/api/v1/pools", json={"name": "chat"}, headers=admin)
    for replicas in range(2, 7):
        client.patch("/api/v1/pools/chat", json={"max_replicas": replicas}, headers=admin)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(audit_log)).scalar() == 6
