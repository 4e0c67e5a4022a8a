"""Tenants: created and deleted by admins, quotas edited by operators with version checks and refused with 422
(naming the field and by how much, nothing stored) when they cannot hold; read by viewers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert, select

from collector.tables import devices
from isolation.tenants import tenant_quotas

Auth = Callable[..., dict[str, str]]
ACME = {"name": "acme", "slo_class": "latency_critical", "quotas": {"chat": {"rate_rps": 5, "max_concurrency": 4}}}
H100_BYTES = 81_559 * 2**20


def _gpu(engine: Engine, node: str, memory_total_bytes: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(devices).values(node_id=node, index=0, memory_total_bytes=memory_total_bytes, updated_at=0.0)
        )


def test_admin_creates_a_tenant_that_everyone_reads(client: TestClient, auth: Auth) -> None:
    created = client.post("/api/v1/tenants", json=ACME, headers=auth("admin"))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["version"] == 1 and body["slo_class"] == "latency_critical"
    assert body["quotas"] == {
        "chat": {
            "gpu_memory_mib": None,
            "active_thread_percentage": None,
            "max_concurrency": 4,
            "rate_rps": 5.0,
            "tokens_per_second": None,
        }
    }
    viewer = auth("viewer")
    assert client.get("/api/v1/tenants/acme", headers=viewer).json() == body
    assert client.get("/api/v1/tenants", headers=viewer).json() == {"items": [body], "next": None}
    assert client.get("/api/v1/tenants/missing", headers=viewer).status_code == 404


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_only_admins_create_and_delete(client: TestClient, auth: Auth, role: str) -> None:
    assert client.post("/api/v1/tenants", json=ACME, headers=auth(role)).status_code == 403
    client.post("/api/v1/tenants", json=ACME, headers=auth("admin"))
    assert client.delete("/api/v1/tenants/acme", headers=auth(role)).status_code == 403


def test_viewers_do_not_edit_and_strangers_do_not_read(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/tenants", json=ACME, headers=auth("admin"))
    viewer = auth("viewer")
    assert client.patch("/api/v1/tenants/acme", json={"slo_class": "batch"}, headers=viewer).status_code == 403
    assert client.put("/api/v1/tenants/acme/quotas/chat", json={}, headers=viewer).status_code == 403
    assert client.delete("/api/v1/tenants/acme/quotas/chat", headers=viewer).status_code == 403
    assert client.get("/api/v1/tenants").status_code == 401


def test_duplicate_name_is_409_and_keeps_the_first(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    client.post("/api/v1/tenants", json=ACME, headers=admin)
    again = client.post("/api/v1/tenants", json={**ACME, "slo_class": "batch"}, headers=admin)
    assert again.status_code == 409
    assert client.get("/api/v1/tenants/acme", headers=admin).json()["slo_class"] == "latency_critical"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "has space"}, "name"),
        ({"slo_class": "gold"}, "slo_class"),
        ({"quotas": {"chat": {"active_thread_percentage": 101}}}, "active_thread_percentage"),
        ({"quotas": {"chat": {"rate_rps": 0}}}, "rate_rps"),
        ({"quotas": {"bad pool": {}}}, "bad pool"),
    ],
)
def test_invalid_tenant_is_422_naming_the_field(
    client: TestClient, auth: Auth, change: dict[str, Any], field: str
) -> None:
    answer = client.post("/api/v1/tenants", json={**ACME, **change}, headers=auth("admin"))
    assert answer.status_code == 422
    assert field in answer.text
    assert client.get("/api/v1/tenants", headers=auth("admin")).json()["items"] == []


def test_operator_sets_a_quota_rounded_to_the_mps_step_and_a_stale_edit_is_409(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/tenants", json=ACME, headers=auth("admin"))
    alice, bob = auth("operator"), auth("operator")
    put = client.put("/api/v1/tenants/acme/quotas/embed", json={"gpu_memory_mib": 1000, "version": 1}, headers=alice)
    assert put.status_code == 200, put.text
    assert put.json()["version"] == 2 and put.json()["quotas"]["embed"]["gpu_memory_mib"] == 1024
    assert set(put.json()["quotas"]) == {"chat", "embed"}
    late = client.put("/api/v1/tenants/acme/quotas/embed", json={"rate_rps": 1, "version": 1}, headers=bob)
    assert late.status_code == 409 and "version 2" in late.text
    stale = client.patch("/api/v1/tenants/acme", json={"slo_class": "batch", "version": 1}, headers=bob)
    assert stale.status_code == 409
    patched = client.patch("/api/v1/tenants/acme", json={"slo_class": "batch", "version": 2}, headers=bob)
    assert patched.status_code == 200 and patched.json()["slo_class"] == "batch" and patched.json()["version"] == 3
    tenant = client.get("/api/v1/tenants/acme", headers=bob).json()
    assert tenant["quotas"]["embed"]["gpu_memory_mib"] == 1024 and tenant["quotas"]["embed"]["rate_rps"] is None


def test_missing_tenant_or_quota_is_404(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/tenants", json=ACME, headers=auth("admin"))
    operator = auth("operator")
    assert client.put("/api/v1/tenants/missing/quotas/chat", json={}, headers=operator).status_code == 404
    assert client.patch("/api/v1/tenants/missing", json={"slo_class": "batch"}, headers=operator).status_code == 404
    assert client.delete("/api/v1/tenants/acme/quotas/embed", headers=operator).status_code == 404
    assert client.delete("/api/v1/tenants/acme/quotas/chat", headers=operator).status_code == 204
    assert client.get("/api/v1/tenants/acme", headers=operator).json()["quotas"] == {}


def test_memory_past_the_smallest_gpu_is_422_by_how_much_and_nothing_is_stored(
    client: TestClient, auth: Auth, engine: Engine
) -> None:
    _gpu(engine, "node-a", H100_BYTES)
    _gpu(engine, "node-b", 2 * H100_BYTES)  # the larger GPU does not help: a replica may land on the smaller one
    admin, operator = auth("admin"), auth("operator")
    client.post("/api/v1/tenants", json={**ACME, "quotas": {"chat": {"gpu_memory_mib": 49_152}}}, headers=admin)
    client.post("/api/v1/tenants", json={"name": "globex", "slo_class": "batch"}, headers=admin)
    refused = client.put("/api/v1/tenants/globex/quotas/chat", json={"gpu_memory_mib": 40_960}, headers=operator)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "gpu_memory_mib"
    assert refused.json()["error"]["message"] == (
        "gpu_memory_mib: tenants of pool chat would pin 90,112 MiB on a GPU of 81,559 MiB (8,553 MiB too much)"
    )
    globex = client.get("/api/v1/tenants/globex", headers=operator).json()
    assert globex["quotas"] == {} and globex["version"] == 1
    fits = client.put("/api/v1/tenants/globex/quotas/chat", json={"gpu_memory_mib": 32_000}, headers=operator)
    assert fits.status_code == 200 and fits.json()["quotas"]["chat"]["gpu_memory_mib"] == 32_000


def test_guaranteed_shares_past_100_are_422_also_when_a_class_changes(client: TestClient, auth: Auth) -> None:
    admin, operator = auth("admin"), auth("operator")
    acme = {**ACME, "quotas": {"chat": {"active_thread_percentage": 60}}}
    assert client.post("/api/v1/tenants", json=acme, headers=admin).status_code == 201
    greedy = {"name": "globex", "slo_class": "standard", "quotas": {"chat": {"active_thread_percentage": 60}}}
    refused = client.post("/api/v1/tenants", json=greedy, headers=admin)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "active_thread_percentage"
    assert refused.json()["error"]["message"].startswith("active_thread_percentage: ")
    assert "past 100% by 20 percentage points" in refused.text
    assert [t["name"] for t in client.get("/api/v1/tenants", headers=admin).json()["items"]] == ["acme"]
    best_effort = client.post("/api/v1/tenants", json={**greedy, "slo_class": "batch"}, headers=admin)
    assert best_effort.status_code == 201
    promoted = client.patch("/api/v1/tenants/globex", json={"slo_class": "standard"}, headers=operator)
    assert promoted.status_code == 422 and "by 20 percentage points" in promoted.text
    assert client.get("/api/v1/tenants/globex", headers=operator).json()["slo_class"] == "batch"


def test_deleting_a_tenant_deletes_its_quotas(client: TestClient, auth: Auth, engine: Engine) -> None:
    admin = auth("admin")
    client.post("/api/v1/tenants", json={**ACME, "quotas": {"chat": {}, "embed": {"rate_rps": 1}}}, headers=admin)
    client.post("/api/v1/tenants", json={"name": "globex", "quotas": {"chat": {}}}, headers=admin)
    assert client.delete("/api/v1/tenants/acme", headers=admin).status_code == 204
    assert client.get("/api/v1/tenants/acme", headers=admin).status_code == 404
    assert client.delete("/api/v1/tenants/acme", headers=admin).status_code == 404
    with engine.connect() as conn:
        left = conn.execute(select(tenant_quotas.c.tenant, tenant_quotas.c.pool)).all()
    assert [tuple(row) for row in left] == [("globex", "chat")]


def test_the_ingest_answer_tells_agents_the_tenants_quotas(client: TestClient, auth: Auth) -> None:
    def push(seq: int) -> Any:
        sample: dict[str, Any] = {"seq": seq, "ts": 1_764_424_800.0, "device": None, "pool": "chat", "metrics": {}}
        answer = client.post(
            "/api/v1/ingest", json={"node_id": "node-a", "samples": [sample]}, headers=auth("agent", "node-a")
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["desired"]

    assert push(1) is None  # no tenant, no managed pool: the agent keeps its own defaults
    body = {"name": "acme", "slo_class": "latency_critical", "quotas": {"chat": {"rate_rps": 5, "max_concurrency": 4}}}
    assert client.post("/api/v1/tenants", json=body, headers=auth("admin")).status_code == 201
    # the change published the tenants part at once: the very next push hears of it, no enforcer tick needed;
    # no pool_limits (acme holds all of chat, nothing to cap) and no tenant_keys (no key yet: callers are anonymous)
    assert push(2) == {
        "tenants": {
            "acme": {
                "slo_class": "latency_critical",
                "quotas": {"chat": {"rate_rps": 5.0, "burst": 5.0, "max_concurrency": 4}},
            }
        },
    }
    assert client.delete("/api/v1/tenants/acme", headers=auth("admin")).status_code == 204
    assert push(3) is None  # the last tenant gone: an empty part, nothing limited
