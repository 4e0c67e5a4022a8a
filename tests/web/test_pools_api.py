"""Pools: created by admins, edited by operators with version checks, read by viewers, replicas counted live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleet.pools import Provisioning
from tests.conftest import pool_sample
from tests.support.clock import FakeClock
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
CHAT = {"name": "chat", "min_replicas": 1, "max_replicas": 6, "slo": {"latency_p99_seconds": 0.5}}


def test_admin_creates_a_pool_that_everyone_reads(client: TestClient, auth: Auth) -> None:
    created = client.post("/api/v1/pools", json=CHAT, headers=auth("admin"))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["policy"] == "hybrid" and body["replica_capacity"] is None and body["version"] == 1
    assert body["slo"] == {"latency_p99_seconds": 0.5, "attainment": 0.99}  # the attainment target's default
    assert body["current_replicas"] == 0 and body["desired_replicas"] is None
    viewer = auth("viewer")
    assert client.get("/api/v1/pools/chat", headers=viewer).json()["max_replicas"] == 6
    assert [p["name"] for p in client.get("/api/v1/pools", headers=viewer).json()["items"]] == ["chat"]
    assert client.get("/api/v1/pools/missing", headers=viewer).status_code == 404


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_only_admins_create_and_delete(client: TestClient, auth: Auth, role: str) -> None:
    assert client.post("/api/v1/pools", json=CHAT, headers=auth(role)).status_code == 403
    client.post("/api/v1/pools", json=CHAT, headers=auth("admin"))
    assert client.delete("/api/v1/pools/chat", headers=auth(role)).status_code == 403


def test_duplicate_name_is_409_and_keeps_the_first(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    client.post("/api/v1/pools", json=CHAT, headers=admin)
    again = client.post("/api/v1/pools", json={**CHAT, "max_replicas": 2}, headers=admin)
    assert again.status_code == 409
    assert client.get("/api/v1/pools/chat", headers=admin).json()["max_replicas"] == 6


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"min_replicas": 9, "max_replicas": 3}, "max_replicas"),
        ({"policy": "yolo"}, "policy"),
        ({"replica_capacity": -1}, "replica_capacity"),
        ({"slo": {"latency_p99_seconds": 0}}, "latency_p99_seconds"),
        ({"name": "has space"}, "name"),
    ],
)
def test_invalid_pool_is_422_naming_the_field(
    client: TestClient, auth: Auth, change: dict[str, Any], field: str
) -> None:
    answer = client.post("/api/v1/pools", json={**CHAT, **change}, headers=auth("admin"))
    assert answer.status_code == 422
    assert field in answer.text
    assert client.get("/api/v1/pools", headers=auth("admin")).json()["items"] == []


def test_operator_edit_bumps_the_version_and_a_stale_edit_is_409(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/pools", json=CHAT, headers=auth("admin"))
    alice, bob = auth("operator"), auth("operator")
    first = client.patch("/api/v1/pools/chat", json={"max_replicas": 10, "version": 1}, headers=alice)
    assert first.status_code == 200, first.text
    assert first.json()["version"] == 2 and first.json()["max_replicas"] == 10
    late = client.patch("/api/v1/pools/chat", json={"max_replicas": 4, "version": 1}, headers=bob)
    assert late.status_code == 409 and "version 2" in late.text
    assert client.get("/api/v1/pools/chat", headers=bob).json()["max_replicas"] == 10


def test_patch_validates_against_the_stored_pool(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/pools", json=CHAT, headers=auth("admin"))
    operator = auth("operator")
    below = client.patch("/api/v1/pools/chat", json={"max_replicas": 1, "min_replicas": 3}, headers=operator)
    assert below.status_code == 422 and "max_replicas" in below.text
    assert client.patch("/api/v1/pools/chat", json={"policy": None}, headers=operator).status_code == 422
    learned = client.patch("/api/v1/pools/chat", json={"replica_capacity": 12.5}, headers=operator).json()
    assert learned["replica_capacity"] == 12.5 and learned["version"] == 2
    cleared = client.patch("/api/v1/pools/chat", json={"replica_capacity": None}, headers=operator).json()
    assert cleared["replica_capacity"] is None
    assert client.patch("/api/v1/pools/missing", json={"max_replicas": 3}, headers=operator).status_code == 404


def test_current_replicas_are_ready_plus_starting_on_nodes_that_are_up_and_ready_is_apart(
    client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    """The glossary's words (docs/architecture.md): current = ready + starting, and ready is its own field."""
    client.post("/api/v1/pools", json=CHAT, headers=auth("admin"))
    for node, ready, starting in (("node-a", 2, 1), ("node-b", 3, 0)):
        extra = {"replicas_ready": ready, "replicas_starting": starting}  # as an agent of the release before says it
        sample = {**pool_sample(1, clock(), pool="chat"), "extra": extra}
        pushed = client.post(
            "/api/v1/ingest", json={"node_id": node, "samples": [sample]}, headers=auth("agent", node_id=node)
        )
        assert pushed.status_code == 200, pushed.text
    viewer = auth("viewer")
    pool = client.get("/api/v1/pools/chat", headers=viewer).json()
    counts = {k: pool[k] for k in ("current_replicas", "ready_replicas", "starting_replicas")}
    assert counts == {"current_replicas": 6, "ready_replicas": 5, "starting_replicas": 1}
    assert client.get("/api/v1/pools", headers=viewer).json()["items"][0]["current_replicas"] == 6
    clock.advance(60)  # both nodes silent: down, their replicas no longer count
    gone = client.get("/api/v1/pools/chat", headers=viewer).json()
    assert (gone["current_replicas"], gone["ready_replicas"], gone["starting_replicas"]) == (0, 0, 0)
    assert pool["draining_replicas"] == gone["draining_replicas"] == 0
    report = {"ts": clock(), "pools": {"chat": {"ready": 1, "starting": 0, "draining": 2}}}
    body = {"node_id": "node-a", "samples": [pool_sample(2, clock(), pool="chat")], "report": report}
    assert client.post("/api/v1/ingest", json=body, headers=auth("agent", node_id="node-a")).status_code == 200
    drained = client.get("/api/v1/pools/chat", headers=viewer).json()
    after = (drained["current_replicas"], drained["ready_replicas"], drained["draining_replicas"])
    assert after == (1, 1, 2)  # draining is counted apart: current stays ready + starting


def test_deleting_a_pool_removes_it(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    client.post("/api/v1/pools", json=CHAT, headers=admin)
    assert client.delete("/api/v1/pools/chat", headers=admin).status_code == 204
    assert client.get("/api/v1/pools/chat", headers=admin).status_code == 404
    assert client.delete("/api/v1/pools/chat", headers=admin).status_code == 404


PROFILE = {
    **CHAT,
    "engine": "vllm",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpus_per_replica": 2,
    "gpu_memory_mib": 40960,
    "node_selector": {"zone": "eu-1", "example.com/gpu": "h100"},
}


def test_a_pool_names_its_engine_model_gpus_and_node_selector(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    plain = client.post("/api/v1/pools", json={**CHAT, "name": "plain"}, headers=admin).json()
    # no engine: built-in, each node keeps the kind it runs the pool as, text on a node new to it
    assert (plain["engine"], plain["model"], plain["gpu_memory_mib"], plain["node_selector"]) == (
        None,
        None,
        None,
        {},
    )
    created = client.post("/api/v1/pools", json=PROFILE, headers=admin)
    assert created.status_code == 201, created.text
    shown = client.get("/api/v1/pools/chat", headers=auth("viewer")).json()
    assert {k: shown[k] for k in ("engine", "model", "gpus_per_replica", "gpu_memory_mib", "node_selector")} == {
        k: PROFILE[k] for k in ("engine", "model", "gpus_per_replica", "gpu_memory_mib", "node_selector")
    }
    operator = auth("operator")
    builtin = client.patch("/api/v1/pools/chat", json={"engine": "classify", "model": None}, headers=operator)
    assert builtin.status_code == 200, builtin.text
    assert (builtin.json()["engine"], builtin.json()["model"]) == ("classify", None)
    cleared = client.patch("/api/v1/pools/chat", json={"node_selector": {}, "gpu_memory_mib": None}, headers=operator)
    assert (cleared.json()["node_selector"], cleared.json()["gpu_memory_mib"]) == ({}, None)
    assert client.patch("/api/v1/pools/chat", json={"engine": None}, headers=operator).status_code == 422


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"engine": "text"}, "model", id="a-built-in-engine-takes-no-model"),
        pytest.param({"engine": "no spaces"}, "engine", id="engine-name"),
        pytest.param({"model": "rm -rf /"}, "model", id="model-name"),
        pytest.param({"node_selector": {"zone!": "eu"}}, "node_selector", id="label-key"),
        pytest.param({"node_selector": {"zone": "-eu"}}, "node_selector", id="label-value"),
        pytest.param({"gpu_memory_mib": 0}, "gpu_memory_mib", id="gpu-memory"),
        pytest.param({"gpus_per_replica": 65}, "gpus_per_replica", id="more-gpus-than-the-wire-carries"),
    ],
)
def test_an_invalid_engine_setting_is_422_naming_the_field(
    client: TestClient, auth: Auth, change: dict[str, Any], field: str
) -> None:
    answer = client.post("/api/v1/pools", json={**PROFILE, **change}, headers=auth("admin"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"].split(".")[0] == field, answer.text


def test_a_patch_to_a_built_in_engine_keeping_the_model_is_422_naming_model(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/pools", json=PROFILE, headers=auth("admin"))
    answer = client.patch("/api/v1/pools/chat", json={"engine": "text"}, headers=auth("operator"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "model"


def test_the_openapi_shows_the_engine_settings(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("PoolIn", "PoolPatch", "PoolOut"):
        assert {"engine", "model", "gpu_memory_mib", "node_selector"} <= set(schemas[name]["properties"]), name


def test_a_pools_attainment_target_is_its_own_and_a_patch_of_the_latency_keeps_it(
    client: TestClient, auth: Auth
) -> None:
    admin = auth("admin")
    created = client.post(
        "/api/v1/pools", json={**CHAT, "slo": {"latency_p99_seconds": 0.5, "attainment": 0.995}}, headers=admin
    )
    assert created.status_code == 201 and created.json()["slo"]["attainment"] == 0.995
    patched = client.patch("/api/v1/pools/chat", json={"slo": {"latency_p99_seconds": 2.0}}, headers=admin).json()
    assert patched["slo"] == {"latency_p99_seconds": 2.0, "attainment": 0.995}
    refused = client.patch("/api/v1/pools/chat", json={"slo": {"attainment": 1.0}}, headers=admin)
    assert refused.status_code == 422 and "attainment" in refused.text


def test_a_pool_answers_what_the_controller_sizes_it_by(client: TestClient, auth: Auth, services: AppServices) -> None:
    client.post("/api/v1/pools", json=CHAT, headers=auth("admin"))
    assert client.get("/api/v1/pools/chat", headers=auth("viewer")).json()["provisioning"] is None
    services.pools.set_provisioning("chat", Provisioning(2.5, 90.0, 2, 1_000.0, wanted=9))
    body = client.get("/api/v1/pools/chat", headers=auth("viewer")).json()
    assert body["provisioning"] == {
        "band_scale": 2.5,
        "attainment_target": 0.99,  # the pool's slo.attainment
        "startup_seconds": 90.0,
        "startup_measurements": 2,
        "ts": 1_000.0,
        "wanted": 9,  # the max of 6 holds it back
    }
    assert body["version"] == 1  # the controller's figures are no operator edit
