"""``/alert-rules``, ``/alerts``, ``/silences`` and ``/webhooks``: roles, validation naming the field, pagination,
and secrets or URL credentials never answered."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from alerting.alert_store import AlertStore, OutboxRow
from alerting.lifecycle import Alert, AlertStatus
from alerting.outbox import DeliverySettings, Outbox
from alerting.receiver import LOOPBACK_NETWORKS
from alerting.sender import FakeSender
from tests.support.clock import FakeClock
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
HOT = {
    "name": "GpuHot",
    "kind": "threshold",
    "metric": "gpu_temperature_celsius",
    "op": ">",
    "threshold": 85,
    "for_seconds": 60,
    "severity": "critical",
}
SECRET = "a-secret-of-at-least-16"


def test_rules_are_read_by_viewers_and_managed_by_operators(client: TestClient, auth: Auth) -> None:
    viewer, operator = auth("viewer"), auth("operator")
    assert client.post("/api/v1/alert-rules", json=HOT, headers=viewer).status_code == 403
    created = client.post("/api/v1/alert-rules", json=HOT, headers=operator)
    assert created.status_code == 201, created.text
    rule = created.json()
    assert (rule["name"], rule["kind"], rule["op"], rule["threshold"], rule["version"]) == (
        "GpuHot",
        "threshold",
        ">",
        85,
        1,
    )
    assert client.get(f"/api/v1/alert-rules/{rule['id']}", headers=viewer).json()["for_seconds"] == 60
    patched = client.patch(
        f"/api/v1/alert-rules/{rule['id']}", json={"threshold": 90, "enabled": False, "version": 1}, headers=operator
    )
    assert patched.status_code == 200 and (patched.json()["threshold"], patched.json()["enabled"]) == (90, False)
    stale = client.patch(f"/api/v1/alert-rules/{rule['id']}", json={"threshold": 95, "version": 1}, headers=operator)
    assert stale.status_code == 409
    listed = client.get("/api/v1/alert-rules", headers=viewer).json()
    assert [r["threshold"] for r in listed["items"]] == [90] and listed["next"] is None
    assert client.delete(f"/api/v1/alert-rules/{rule['id']}", headers=viewer).status_code == 403
    assert client.delete(f"/api/v1/alert-rules/{rule['id']}", headers=operator).status_code == 204
    assert client.get(f"/api/v1/alert-rules/{rule['id']}", headers=viewer).status_code == 404


def test_a_rule_that_cannot_hold_is_422_naming_the_field_and_nothing_is_stored(client: TestClient, auth: Auth) -> None:
    operator = auth("operator")
    for body, field in (
        ({**HOT, "metric": "gpu_fan_noise"}, "metric"),
        ({**HOT, "op": "=="}, "op"),
        ({**HOT, "severity": "page"}, "severity"),
        ({"name": "x", "kind": "predictive", "probability": 0.5}, "horizon_seconds"),
    ):
        answer = client.post("/api/v1/alert-rules", json=body, headers=operator)
        assert answer.status_code == 422 and field in answer.text, answer.text
    created = client.post("/api/v1/alert-rules", json=HOT, headers=operator).json()
    bad_patch = client.patch(f"/api/v1/alert-rules/{created['id']}", json={"group_by": "pool"}, headers=operator)
    assert bad_patch.status_code == 422 and "aggregate" in bad_patch.text
    null_labels = client.patch(f"/api/v1/alert-rules/{created['id']}", json={"labels": None}, headers=operator)
    assert null_labels.status_code == 422 and null_labels.json()["error"]["field"] == "labels"
    assert client.get("/api/v1/alert-rules", headers=operator).json()["items"][0]["group_by"] == "series"


def test_a_latency_rule_may_take_its_threshold_from_each_pools_slo_and_keep_firing(
    client: TestClient, auth: Auth
) -> None:
    operator = auth("operator")
    body = {
        "name": "NearSlo",
        "kind": "threshold",
        "metric": "request_latency_p99_seconds",
        "op": ">",
        "slo_ratio": 0.8,
        "keep_firing_seconds": 300,
    }
    created = client.post("/api/v1/alert-rules", json=body, headers=operator)
    assert created.status_code == 201, created.text
    rule = created.json()
    assert (rule["slo_ratio"], rule["keep_firing_seconds"], rule["threshold"]) == (0.8, 300.0, None)
    wrong = client.post("/api/v1/alert-rules", json={**body, "metric": "gpu_utilization_ratio"}, headers=operator)
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "slo_ratio"
    both = client.patch(f"/api/v1/alert-rules/{rule['id']}", json={"threshold": 2.0}, headers=operator)
    assert both.status_code == 422 and both.json()["error"]["field"] == "threshold"


def _alert(rule_id: int, node: str, pool: str, status: AlertStatus, now: float) -> Alert:
    labels = {"alertname": "GpuHot", "severity": "critical", "rule_id": str(rule_id), "node": node, "pool": pool}
    return Alert(rule_id, f"fp{node}", labels, {"action": "cool"}, status, 90.0, now, now, now)


def test_alerts_filter_by_state_rule_and_pool_and_page(
    client: TestClient, auth: Auth, services: AppServices, clock: FakeClock
) -> None:
    store = AlertStore(services.engine)
    store.commit(
        [
            _alert(1, "a", "chat", AlertStatus.FIRING, clock()),
            _alert(1, "b", "embed", AlertStatus.PENDING, clock()),
            _alert(2, "c", "chat", AlertStatus.FIRING, clock()),
        ],
        [],
        [],
        [],
    )
    viewer = auth("viewer")
    page = client.get("/api/v1/alerts", params={"limit": 2}, headers=viewer).json()
    assert [a["labels"]["node"] for a in page["items"]] == ["c", "b"] and page["next"]
    rest = client.get("/api/v1/alerts", params={"limit": 2, "cursor": page["next"]}, headers=viewer).json()
    assert [a["labels"]["node"] for a in rest["items"]] == ["a"] and rest["next"] is None
    firing = client.get("/api/v1/alerts", params={"state": "firing", "pool": "chat"}, headers=viewer).json()
    assert sorted(a["labels"]["node"] for a in firing["items"]) == ["a", "c"]
    by_rule = client.get("/api/v1/alerts", params={"rule": 1, "state": "pending"}, headers=viewer).json()
    assert [a["labels"]["node"] for a in by_rule["items"]] == ["b"]
    assert client.get("/api/v1/alerts", params={"state": "burning"}, headers=viewer).status_code == 422
    assert client.get("/api/v1/alerts").status_code == 401


def test_operators_silence_alerts_and_expire_silences(client: TestClient, auth: Auth, services: AppServices) -> None:
    AlertStore(services.engine).commit([_alert(1, "a", "chat", AlertStatus.FIRING, services.clock())], [], [], [])
    body = {"matchers": [{"name": "pool", "value": "chat"}], "duration_seconds": 3600, "comment": "maintenance"}
    assert client.post("/api/v1/silences", json=body, headers=auth("viewer")).status_code == 403
    created = client.post("/api/v1/silences", json=body, headers=auth("operator"))
    assert created.status_code == 201, created.text
    silence = created.json()
    assert silence["active"] and silence["ends_at"] - silence["starts_at"] == 3600
    viewer = auth("viewer")
    assert client.get("/api/v1/alerts", headers=viewer).json()["items"][0]["silenced"] is True
    assert [s["id"] for s in client.get("/api/v1/silences", headers=viewer).json()["items"]] == [silence["id"]]
    assert client.delete(f"/api/v1/silences/{silence['id']}", headers=auth("operator")).status_code == 204
    assert client.get("/api/v1/silences", headers=viewer).json()["items"] == []
    expired = client.get("/api/v1/silences", params={"expired": True}, headers=viewer).json()["items"]
    assert [s["active"] for s in expired] == [False]
    assert client.get("/api/v1/alerts", headers=viewer).json()["items"][0]["silenced"] is False
    assert client.delete("/api/v1/silences/nope", headers=auth("operator")).status_code == 404


def test_a_silence_without_an_end_or_with_a_bad_matcher_is_422(client: TestClient, auth: Auth) -> None:
    operator = auth("operator")
    no_end = client.post("/api/v1/silences", json={"matchers": [{"name": "a", "value": "b"}]}, headers=operator)
    assert no_end.status_code == 422 and "ends_at" in no_end.text
    past = client.post(
        "/api/v1/silences",
        json={"matchers": [{"name": "a", "value": "b"}], "ends_at": "2001-01-01T00:00:00Z"},
        headers=operator,
    )
    assert past.status_code == 422 and "ends_at" in past.text
    regex = client.post(
        "/api/v1/silences",
        json={"matchers": [{"name": "a", "value": "(", "op": "=~"}], "duration_seconds": 60},
        headers=operator,
    )
    assert regex.status_code == 422 and "matchers" in regex.text
    empty = client.post("/api/v1/silences", json={"matchers": [], "duration_seconds": 60}, headers=operator)
    assert empty.status_code == 422 and "matchers" in empty.text


def test_admins_manage_webhooks_and_neither_secret_nor_credentials_come_back(client: TestClient, auth: Auth) -> None:
    url = "https://bot:hunter2@hooks.example.com/notify?token=abc"
    body = {"url": url, "secret": SECRET, "name": "oncall"}
    assert client.post("/api/v1/webhooks", json=body, headers=auth("operator")).status_code == 403
    created = client.post("/api/v1/webhooks", json=body, headers=auth("admin"))
    assert created.status_code == 201, created.text
    hook = created.json()
    assert hook["url"] == "https://***@hooks.example.com/notify?token=***" and hook["has_secret"] is True
    listed = client.get("/api/v1/webhooks", headers=auth("viewer"))
    assert "hunter2" not in listed.text and SECRET not in listed.text and "abc" not in listed.text
    for bad, field in (
        ({"url": "ftp://x/y", "secret": SECRET}, "url"),
        ({"url": "https://x/y"}, "secret"),
        ({"url": "https://x/y", "secret": "short"}, "secret"),
    ):
        answer = client.post("/api/v1/webhooks", json=bad, headers=auth("admin"))
        assert answer.status_code == 422 and field in answer.text, answer.text
    assert client.delete(f"/api/v1/webhooks/{hook['id']}", headers=auth("admin")).status_code == 204
    assert client.delete(f"/api/v1/webhooks/{hook['id']}", headers=auth("admin")).status_code == 404


def test_the_allow_list_refuses_other_hosts(client: TestClient, auth: Auth, services: AppServices) -> None:
    services.settings.webhook_allowed_hosts = ["*.example.com"]
    ok = client.post(
        "/api/v1/webhooks", json={"url": "https://a.example.com/x", "secret": SECRET}, headers=auth("admin")
    )
    assert ok.status_code == 201
    refused = client.post(
        "/api/v1/webhooks", json={"url": "https://evil.com/x", "secret": SECRET}, headers=auth("admin")
    )
    assert refused.status_code == 422 and "allow-list" in refused.text


def test_the_delivery_log_of_a_webhook(client: TestClient, auth: Auth, services: AppServices, clock: FakeClock) -> None:
    services.settings.webhook_allowed_networks = LOOPBACK_NETWORKS
    hook = client.post(
        "/api/v1/webhooks", json={"url": "http://127.0.0.1:9/x", "secret": SECRET}, headers=auth("admin")
    ).json()
    AlertStore(services.engine).commit([], [], [], [OutboxRow(hook["id"], "g", "{}", clock())])
    outbox = Outbox(services.engine, FakeSender(script=[503]), DeliverySettings(), jitter=lambda: 0.0)
    try:
        outbox.run(clock())
        outbox.run(clock() + 1)
    finally:
        outbox.close()
    viewer = auth("viewer")
    log = client.get(f"/api/v1/webhooks/{hook['id']}/deliveries", params={"limit": 1}, headers=viewer).json()
    assert [(d["attempt"], d["outcome"], d["status_code"]) for d in log["items"]] == [(2, "delivered", 200)]
    rest = client.get(
        f"/api/v1/webhooks/{hook['id']}/deliveries", params={"limit": 1, "cursor": log["next"]}, headers=viewer
    ).json()
    assert [(d["attempt"], d["outcome"], d["status_code"]) for d in rest["items"]] == [(1, "failed", 503)]
    assert rest["items"][0]["delivery_id"] == log["items"][0]["delivery_id"]
    assert client.get("/api/v1/webhooks/nope/deliveries", headers=viewer).status_code == 404
