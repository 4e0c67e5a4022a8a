"""Tenant API keys through the admin API: the clear key answered once, listed without secrets, revoked, audited
without the secret, and only their digests sent to the agents in the ingest answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, insert, select

from inference_agent.pusher import MalformedDesired, parse_ack
from isolation.tenants import tenant_api_keys, tenants
from web.tables import audit_log
from wire.control import MAX_KEYS_PER_TENANT, MAX_TENANT_KEYS, DesiredState, key_digest

Auth = Callable[..., dict[str, str]]
KEYS = "/api/v1/tenants/acme/keys"


def _acme(client: TestClient, auth: Auth) -> None:
    assert client.post("/api/v1/tenants", json={"name": "acme"}, headers=auth("admin")).status_code == 201


def test_a_new_key_is_shown_once_and_stored_as_its_digest(client: TestClient, auth: Auth, engine: Engine) -> None:
    _acme(client, auth)
    admin = auth("admin")
    created = client.post(KEYS, json={"name": "checkout"}, headers=admin)
    assert created.status_code == 201, created.text
    body = created.json()
    key = body.pop("key")
    assert key.startswith("fp_tenant_") and body["prefix"] == key[:16] and body["name"] == "checkout"
    assert client.get(KEYS, headers=admin).json() == {"items": [body], "next": None}
    unnamed = client.post(KEYS, headers=admin)  # the body is optional
    assert unnamed.status_code == 201 and unnamed.json()["name"] == f"key-{unnamed.json()['id']}"
    with engine.connect() as conn:
        stored = {r.key_hash for r in conn.execute(select(tenant_api_keys))}
        logged = str([tuple(r) for r in conn.execute(select(audit_log))])
    assert key_digest(key) in stored and key not in str(stored)
    assert key not in logged and key_digest(key) not in logged


def test_revoked_keys_are_gone_and_unknown_ones_are_404(client: TestClient, auth: Auth) -> None:
    _acme(client, auth)
    admin = auth("admin")
    key_id = client.post(KEYS, headers=admin).json()["id"]
    assert client.delete(f"{KEYS}/{key_id}", headers=admin).status_code == 204
    assert client.delete(f"{KEYS}/{key_id}", headers=admin).status_code == 404
    assert client.get(KEYS, headers=admin).json()["items"] == []
    for method in ("GET", "POST"):
        assert client.request(method, "/api/v1/tenants/missing/keys", headers=admin).status_code == 404


def test_only_admins_manage_keys(client: TestClient, auth: Auth) -> None:
    _acme(client, auth)
    for role in ("operator", "viewer"):
        assert client.post(KEYS, headers=auth(role)).status_code == 403
        assert client.get(KEYS, headers=auth(role)).status_code == 403


def test_a_tenant_holds_a_bounded_number_of_keys_and_deleting_it_deletes_them(
    client: TestClient, auth: Auth, engine: Engine
) -> None:
    _acme(client, auth)
    admin = auth("admin")
    for _ in range(MAX_KEYS_PER_TENANT):
        assert client.post(KEYS, headers=admin).status_code == 201
    refused = client.post(KEYS, headers=admin)
    assert refused.status_code == 422 and "revoke one first" in refused.text
    assert client.delete("/api/v1/tenants/acme", headers=admin).status_code == 204
    with engine.connect() as conn:
        assert conn.execute(select(tenant_api_keys)).all() == []


def test_the_ingest_answer_carries_the_digests_of_live_keys_only(client: TestClient, auth: Auth) -> None:
    def keys_told(seq: int) -> dict[str, str]:
        sample: dict[str, Any] = {"seq": seq, "ts": 1_764_424_800.0, "device": None, "pool": "chat", "metrics": {}}
        answer = client.post(
            "/api/v1/ingest", json={"node_id": "node-a", "samples": [sample]}, headers=auth("agent", "node-a")
        )
        assert answer.status_code == 200, answer.text
        return DesiredState.model_validate(answer.json()["desired"] or {}).tenant_keys

    _acme(client, auth)
    admin = auth("admin")
    kept, revoked = (client.post(KEYS, headers=admin).json() for _ in range(2))
    # each change publishes the tenants part at once: the very next push is told, with no enforcer tick between
    assert keys_told(1) == {key_digest(kept["key"]): "acme", key_digest(revoked["key"]): "acme"}
    client.delete(f"{KEYS}/{revoked['id']}", headers=admin)
    assert keys_told(2) == {key_digest(kept["key"]): "acme"}


def _bulk_keys(engine: Engine, count: int, *, first_at: float = 0.0) -> None:
    """``count`` keys of a tenant ``bulk``, put straight in the table (the API would take minutes)."""
    with engine.begin() as conn:
        if conn.execute(select(tenants.c.name).where(tenants.c.name == "bulk")).first() is None:
            conn.execute(
                insert(tenants).values(name="bulk", slo_class="standard", version=1, created_at=0.0, updated_at=0.0)
            )
        rows = [
            {
                "id": f"b{first_at:.0f}-{i}",
                "tenant": "bulk",
                "name": f"k{i}",
                "prefix": "fp_tenant_bulk",
                "key_hash": key_digest(f"bulk-{first_at}-{i}"),
                "created_at": first_at + i,
            }
            for i in range(count)
        ]
        conn.execute(insert(tenant_api_keys), rows)


def _told(client: TestClient, auth: Auth) -> DesiredState | MalformedDesired:
    """What an agent makes of the ingest answer's desired state (its own parser)."""
    sample: dict[str, Any] = {"seq": 1, "ts": 1_764_424_800.0, "device": None, "pool": "chat", "metrics": {}}
    answer = client.post(
        "/api/v1/ingest", json={"node_id": "node-a", "samples": [sample]}, headers=auth("agent", "node-a")
    )
    assert answer.status_code == 200, answer.text[:200]
    return parse_ack(answer.content).desired


def test_keys_past_what_a_desired_state_carries_are_refused_at_creation_naming_the_bound(
    client: TestClient, auth: Auth, engine: Engine
) -> None:
    _acme(client, auth)
    admin = auth("admin")
    _bulk_keys(engine, MAX_TENANT_KEYS - 1)
    assert client.post(KEYS, headers=admin).status_code == 201  # the 100,000th
    refused = client.post(KEYS, headers=admin)
    assert refused.status_code == 422, refused.text  # before: stored, then 500: no desired state could hold it
    assert f"{MAX_TENANT_KEYS}" in refused.text and "revoke" in refused.text
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(tenant_api_keys)).scalar_one() == MAX_TENANT_KEYS
    told = _told(client, auth)
    assert isinstance(told, DesiredState) and len(told.tenant_keys) == MAX_TENANT_KEYS


def test_keys_already_past_the_bound_never_make_a_desired_state_an_agent_refuses(
    client: TestClient, auth: Auth, engine: Engine
) -> None:
    _bulk_keys(engine, MAX_TENANT_KEYS)  # as two creations at once on PostgreSQL, or an older release, left them
    _bulk_keys(engine, 5, first_at=1e9)
    _acme(client, auth)  # a change of tenants publishes the tenants part
    told = _told(client, auth)
    assert isinstance(told, DesiredState), told  # before: every change of tenants failed 500, nothing was told
    assert len(told.tenant_keys) == MAX_TENANT_KEYS and key_digest(f"bulk-{1e9}-0") not in told.tenant_keys
