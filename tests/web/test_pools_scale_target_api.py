"""A pool's ``scale_target`` through the API (set, cleared, a malformed one refused naming the field) and its
``scaled_by``, what the controller found scaling the target instead."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from fleet.pools import PoolStore
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
LWS = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet/serving/llama-70b"


def test_a_scale_target_is_set_shown_and_cleared(client: TestClient, auth: Auth) -> None:
    created = client.post("/api/v1/pools", json={"name": "chat", "scale_target": LWS}, headers=auth("admin"))
    assert created.status_code == 201, created.text
    assert (created.json()["scale_target"], created.json()["scaled_by"]) == (LWS, None)
    cleared = client.patch("/api/v1/pools/chat", json={"scale_target": None}, headers=auth("operator"))
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["scale_target"] is None  # the Deployment named after the pool again


def test_a_malformed_scale_target_is_refused_naming_the_field_and_the_part(client: TestClient, auth: Auth) -> None:
    refused = client.post(
        "/api/v1/pools", json={"name": "chat", "scale_target": "apps/v1/deployment/serving/x"}, headers=auth("admin")
    )
    assert refused.status_code == 422
    assert "scale_target" in refused.text and "kind 'deployment' is not CamelCase" in refused.text
    client.post("/api/v1/pools", json={"name": "chat"}, headers=auth("admin"))
    patched = client.patch("/api/v1/pools/chat", json={"scale_target": "apps/v1/Deployment"}, headers=auth("operator"))
    assert patched.status_code == 422 and "expected apiVersion/kind/namespace/name" in patched.text


def test_scaled_by_shows_the_owner_the_controller_found(client: TestClient, auth: Auth, services: AppServices) -> None:
    client.post("/api/v1/pools", json={"name": "chat", "scale_target": LWS}, headers=auth("admin"))
    PoolStore(services.engine).set_scaled_by("chat", "ScaledObject serving/llama-70b")
    body = client.get("/api/v1/pools/chat", headers=auth("viewer")).json()
    assert body["scaled_by"] == "ScaledObject serving/llama-70b"
