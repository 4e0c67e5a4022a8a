"""One error shape everywhere (``{"error": {"code", "message", "field"}}``), and failed authentication rate-limited
per client address, logged without the token."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from alerting.rules import RuleSpec
from fleet.pools import PoolSpec
from fleetpilot.settings import ServerSettings
from isolation.tenants import QuotaSpec
from tests.support.clock import FakeClock
from web.app import create_app
from web.errors import refused
from web.services import AppServices
from wire.errors import FieldError

Auth = Callable[..., dict[str, str]]
CHAT = {"name": "chat", "min_replicas": 1, "max_replicas": 6}


def error_of(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == code and error["message"]
    assert "field" in error and "detail" not in answer.json()
    return error


def test_401_without_a_token_and_with_an_unknown_one(client: TestClient) -> None:
    missing = error_of(client.get("/api/v1/pools"), 401, "unauthorized")
    assert missing["field"] is None
    unknown = client.get("/api/v1/pools", headers={"Authorization": "Bearer fp_nope_nope"})
    error_of(unknown, 401, "unauthorized")
    assert unknown.headers["WWW-Authenticate"] == "Bearer"


def test_403_404_409(client: TestClient, auth: Auth) -> None:
    error_of(client.post("/api/v1/pools", json=CHAT, headers=auth("viewer")), 403, "forbidden")
    assert (
        "no pool 'ghost'"
        in error_of(client.get("/api/v1/pools/ghost", headers=auth("viewer")), 404, "not_found")["message"]
    )
    error_of(client.get("/api/v1/no-such-route", headers=auth("viewer")), 404, "not_found")
    admin = auth("admin")
    client.post("/api/v1/pools", json=CHAT, headers=admin)
    error_of(client.post("/api/v1/pools", json=CHAT, headers=admin), 409, "conflict")
    stale = client.patch("/api/v1/pools/chat", json={"max_replicas": 4, "version": 7}, headers=admin)
    assert error_of(stale, 409, "conflict")["current_version"] == 1


def test_412_names_the_current_version(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    client.post("/api/v1/pools", json=CHAT, headers=admin)
    stale = client.patch("/api/v1/pools/chat", json={"max_replicas": 4}, headers={**admin, "If-Match": '"9"'})
    error = error_of(stale, 412, "precondition_failed")
    assert error["current_version"] == 1 and '"1"' in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "location", "field"),
    [
        ("POST", "/api/v1/pools", {**CHAT, "slo": {"latency_p99_seconds": 0}}, "body", "slo.latency_p99_seconds"),
        ("POST", "/api/v1/pools", {"min_replicas": 1}, "body", "name"),
        (
            "POST",
            "/api/v1/silences",
            {"matchers": [{"value": "x"}], "duration_seconds": 60},
            "body",
            "matchers[0].name",
        ),
        ("GET", "/api/v1/scaling-events?limit=0", None, "query", "limit"),
        ("GET", "/api/v1/alert-rules/0", None, "path", "rule_id"),
    ],
)
def test_422_names_the_first_failing_field_with_its_location(
    client: TestClient, auth: Auth, method: str, path: str, body: Any, location: str, field: str
) -> None:
    answer = client.request(method, path, json=body, headers=auth("admin"))
    error = error_of(answer, 422, "validation_failed")
    assert (error["location"], error["field"]) == (location, field)
    assert field in error["message"] and error["errors"][0]["field"] == field


def test_422_from_a_domain_check_names_its_field(client: TestClient, auth: Auth) -> None:
    answer = client.post("/api/v1/pools", json={**CHAT, "min_replicas": 9, "max_replicas": 3}, headers=auth("admin"))
    assert error_of(answer, 422, "validation_failed")["field"] == "max_replicas"
    cursor = client.get("/api/v1/scaling-events?cursor=abc", headers=auth("viewer"))
    assert error_of(cursor, 422, "validation_failed")["field"] == "cursor"


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: PoolSpec(min_replicas=3, max_replicas=2), "max_replicas"),
        (lambda: PoolSpec(startup_seconds=-1), "startup_seconds"),
        (lambda: QuotaSpec(rate_rps=-1), "rate_rps"),
        (lambda: RuleSpec(name="x", kind="threshold", metric="gpu_temperature_celsius", op="~"), "op"),  # type: ignore[arg-type]
    ],
)
def test_a_domain_validator_names_its_field_by_raising_field_error(build: Callable[[], object], field: str) -> None:
    with pytest.raises(FieldError) as caught:
        build()
    assert caught.value.field == field and str(caught.value) == f"{field}: {caught.value.message}"
    assert refused(caught.value).field == field


def test_the_field_comes_from_the_error_not_from_its_words() -> None:
    """A plain ValueError whose text happens to start with a word and a colon names no field (no regex reads it)."""
    assert refused(ValueError("max_replicas: must be at least 1")).field is None
    assert refused(FieldError("samples[3].metrics.x", "unknown")).field == "samples[3].metrics.x"


def test_database_down_is_503_with_retry_after_and_a_crash_is_500_without_a_trace(
    services: AppServices, auth: Auth, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = auth("viewer")

    def down(*_args: object, **_kwargs: object) -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    def crash(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("secret internals")

    with TestClient(create_app(services), raise_server_exceptions=False) as client:
        monkeypatch.setattr(services.pools, "list", down)
        unavailable = client.get("/api/v1/pools", headers=headers)
        assert error_of(unavailable, 503, "unavailable") and unavailable.headers["Retry-After"] == "2"
        monkeypatch.setattr(services.pools, "list", crash)
        failed = client.get("/api/v1/pools", headers=headers)
        assert error_of(failed, 500, "internal") and "secret internals" not in failed.text


@pytest.fixture
def settings(database_url: str) -> ServerSettings:
    return ServerSettings(database_url=database_url, token_cache_seconds=0, auth_max_failures=3)


def test_failed_authentication_is_rate_limited_per_address_and_logged_without_the_token(
    client: TestClient, auth: Auth, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    good = auth("viewer")
    guess = {"Authorization": "Bearer fp_guess_0123456789abcdef"}
    with caplog.at_level(logging.WARNING, logger="web.auth"):
        for _ in range(3):
            assert client.get("/api/v1/pools", headers=guess).status_code == 401
    assert len(caplog.records) == 3 and "testclient" in caplog.text and "unknown token" in caplog.text
    assert "fp_guess" not in caplog.text
    clock.advance(10)
    limited = client.get("/api/v1/pools", headers=guess)
    assert error_of(limited, 429, "rate_limited") and limited.headers["Retry-After"] == "50"
    # A good token from the same address is served: only the failing caller waits.
    assert client.get("/api/v1/pools", headers=good).status_code == 200
    ingest = client.post("/api/v1/ingest", json={"node_id": "n", "samples": []}, headers=guess)
    assert ingest.status_code == 429 and ingest.headers["Retry-After"] == "50"
    clock.advance(50)  # the oldest failures leave the 60 s window
    assert client.get("/api/v1/pools", headers=guess).status_code == 401


def test_a_wrong_role_is_not_an_authentication_failure(client: TestClient, auth: Auth) -> None:
    viewer = auth("viewer")
    for _ in range(5):
        assert client.delete("/api/v1/pools/chat", headers=viewer).status_code == 403
    assert client.get("/api/v1/pools", headers=viewer).status_code == 200


def test_every_answer_carries_a_request_id_and_keeps_a_plausible_one_given(client: TestClient) -> None:
    assert len(client.get("/healthz").headers["X-Request-ID"]) == 16
    assert client.get("/healthz", headers={"X-Request-ID": "gw-1234.5"}).headers["X-Request-ID"] == "gw-1234.5"
    replaced = client.get("/healthz", headers={"X-Request-ID": "bad id <x>"}).headers["X-Request-ID"]
    assert replaced != "bad id <x>" and len(replaced) == 16


@pytest.mark.parametrize(
    ("method", "path", "raw_body", "field"),
    [
        ("GET", "/api/v1/scaling-events?cursor=99999999999999999999999", None, "cursor"),
        ("GET", "/api/v1/audit?cursor=99999999999999999999999", None, "cursor"),
        ("GET", "/api/v1/alerts?rule=99999999999999999999999", None, "rule"),
        ("GET", "/api/v1/series?metric=gpu_utilization_ratio&device=99999999999999999999", None, "device"),
        ("GET", "/api/v1/series?metric=gpu_utilization_ratio&step=inf", None, "step"),
        ("GET", "/api/v1/capacity-plan?headroom=inf", None, "headroom"),
        ("POST", "/api/v1/pools", '{"name": "p", "max_replicas": 99999999999999999999999}', "max_replicas"),
        ("POST", "/api/v1/pools", '{"name": "p", "replica_capacity": Infinity}', "replica_capacity"),
        ("PUT", "/api/v1/tenants/t/quotas/p", '{"rate_rps": NaN}', "rate_rps"),
        (
            "POST",
            "/api/v1/silences",
            '{"matchers": [{"name": "a", "value": "b"}], "duration_seconds": Infinity}',
            "duration_seconds",
        ),
    ],
)
def test_numbers_past_what_the_database_or_json_can_hold_are_422_not_500(
    client: TestClient, auth: Auth, method: str, path: str, raw_body: str | None, field: str
) -> None:
    """Found by the schemathesis run and by hand: each was a 500 (integer overflow, or Infinity in the answer)."""
    headers = {**auth("admin"), "Content-Type": "application/json"}
    error = error_of(client.request(method, path, content=raw_body, headers=headers), 422, "validation_failed")
    assert error["field"] == field
