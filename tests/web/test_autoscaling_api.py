"""Manual scale, scaling events, routing weights and the desired state in the ingest answer, over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from autoscaler.actuators.local import LocalActuator
from autoscaler.controller import Controller, ControllerSettings
from fleet.pools import PoolSpec
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from web.services import AppServices

Auth = Callable[..., dict[str, str]]


def push(client: TestClient, auth: Auth, node: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    answer = client.post("/api/v1/ingest", json={"node_id": node, "samples": samples}, headers=auth("agent", node))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def chat_sample(seq: int, clock: FakeClock, rate: float, ready: int) -> dict[str, Any]:
    return {**pool_sample(seq, clock(), pool="chat", request_rate_per_second=rate), "extra": {"replicas_ready": ready}}


def test_manual_scale_by_an_operator_within_the_pool_range(client: TestClient, auth: Auth, clock: FakeClock) -> None:
    client.post("/api/v1/pools", json={"name": "chat", "max_replicas": 10}, headers=auth("admin"))
    operator = auth("operator")
    scaled = client.post("/api/v1/pools/chat/scale", json={"replicas": 7, "reason": "launch"}, headers=operator)
    assert scaled.status_code == 200, scaled.text
    manual = scaled.json()["manual"]
    assert manual["replicas"] == 7 and "launch" in manual["reason"]
    assert manual["until"] == clock() + 1800  # manual_scale_seconds by default
    assert client.post("/api/v1/pools/chat/scale", json={"replicas": 11}, headers=operator).status_code == 422
    assert client.post("/api/v1/pools/chat/scale", json={"replicas": 2}, headers=auth("viewer")).status_code == 403
    assert client.post("/api/v1/pools/none/scale", json={"replicas": 2}, headers=operator).status_code == 404
    clock.advance(1801)
    assert client.get("/api/v1/pools/chat", headers=operator).json()["manual"] is None  # expired


def test_scaling_events_list_newest_first_with_a_cursor(
    client: TestClient, auth: Auth, clock: FakeClock, services: AppServices
) -> None:
    body = {"name": "chat", "policy": "reactive", "replica_capacity": 10, "max_replicas": 50}
    client.post("/api/v1/pools", json=body, headers=auth("admin"))
    assert isinstance(services.actuator, LocalActuator)
    loop = Controller(services.engine, ControllerSettings(), services.actuator, fleet=services.fleet, holder="test")
    for seq, (rate, ready) in enumerate(((140.0, 2), (280.0, 4), (560.0, 8))):  # each tick wants more: 3 events
        push(client, auth, "node-a", [chat_sample(seq, clock, rate, ready)])
        loop.run(clock())
        clock.advance(1)
    viewer = auth("viewer")
    first = client.get("/api/v1/scaling-events", params={"pool": "chat", "limit": 2}, headers=viewer).json()
    assert [e["inputs"]["demand"] for e in first["items"]] == [560.0, 280.0]
    assert first["items"][0]["outcome"] == "applied" and first["items"][0]["actuator"] == "local"
    rest = client.get(
        "/api/v1/scaling-events", params={"pool": "chat", "limit": 2, "cursor": first["next"]}, headers=viewer
    ).json()
    assert [e["inputs"]["demand"] for e in rest["items"]] == [140.0] and rest["next"] is None
    bad = client.get("/api/v1/scaling-events", params={"cursor": "x"}, headers=viewer)
    assert bad.status_code == 422


def test_ingest_answer_carries_the_nodes_share_once_the_pool_is_managed(
    client: TestClient, auth: Auth, clock: FakeClock, services: AppServices
) -> None:
    assert push(client, auth, "node-a", [chat_sample(1, clock, 10.0, 1)])["desired"] is None
    assert isinstance(services.actuator, LocalActuator)
    pool = services.pools.create("chat", PoolSpec(), now=clock())
    fleet = services.fleet.read(clock())
    services.actuator.apply(pool, 3, fleet)
    services.actuator.publish(services.pools.list(), fleet)
    assert push(client, auth, "node-a", [chat_sample(2, clock, 10.0, 1)])["desired"] == {
        "pools": {"chat": {"replicas": 3, "gpus": 1}}  # no engine named: built-in, one slot each
    }


def test_routing_weights_rank_the_less_loaded_node_first(client: TestClient, auth: Auth, clock: FakeClock) -> None:
    push(client, auth, "busy", [gpu_sample(1, clock(), gpu_utilization_ratio=0.9), chat_sample(2, clock, 5.0, 1)])
    push(client, auth, "idle", [gpu_sample(1, clock(), gpu_utilization_ratio=0.1), chat_sample(2, clock, 5.0, 1)])
    body = client.get("/api/v1/routing/weights", params={"pool": "chat"}, headers=auth("viewer")).json()
    assert [i["node"] for i in body["items"]] == ["idle", "busy"]
    assert body["items"][0]["weight"] < body["items"][1]["weight"]
    assert body["coefficients"] == {"alpha": 0.5, "beta": 0.3, "gamma": 0.2}
    assert client.get("/api/v1/routing/weights", params={"pool": "nope"}, headers=auth("viewer")).status_code == 404
