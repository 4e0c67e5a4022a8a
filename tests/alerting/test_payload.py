"""The wire (CONTRACT section 10): Alertmanager webhook payloads grouped by rule and pool, and their signature."""

from __future__ import annotations

import hashlib
import hmac
import json

from alerting.lifecycle import Alert, AlertStatus
from alerting.payload import (
    alert_body,
    alertmanager_alerts,
    encode,
    group,
    rfc3339,
    signature,
    verify,
    visible_labels,
    webhook_payload,
    with_group,
)

T0 = 1_764_424_800.0


def alert(node: str, pool: str | None, status: AlertStatus = AlertStatus.FIRING, rule_id: int = 1) -> Alert:
    labels = {"alertname": "Hot", "severity": "critical", "rule_id": str(rule_id), "node": node}
    if pool is not None:
        labels["pool"] = pool
    resolved_at = T0 + 60 if status is AlertStatus.RESOLVED else None
    return Alert(rule_id, f"fp-{node}", labels, {"action": "cool it"}, status, 90.0, T0, T0, T0, resolved_at)


def test_alerts_group_by_rule_and_pool() -> None:
    groups = group([alert("a", "chat"), alert("b", "embed"), alert("c", "chat"), alert("d", "chat", rule_id=2)])
    assert [(g.rule_id, g.pool, [a.labels["node"] for a in g.alerts]) for g in groups] == [
        (1, "chat", ["a", "c"]),
        (1, "embed", ["b"]),
        (2, "chat", ["d"]),
    ]


def test_the_webhook_payload_is_alertmanager_version_4() -> None:
    grouped = group([alert("a", "chat"), alert("b", "chat", AlertStatus.RESOLVED)])[0]
    body = webhook_payload(grouped, receiver="oncall", external_url="http://fp:8080")
    assert set(body) == {
        "version",
        "groupKey",
        "truncatedAlerts",
        "status",
        "receiver",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "counts",
        "alerts",
    }
    assert (body["version"], body["status"], body["receiver"], body["truncatedAlerts"]) == ("4", "firing", "oncall", 0)
    assert body["groupLabels"] == {"alertname": "Hot", "pool": "chat"}
    assert body["commonLabels"] == {"alertname": "Hot", "severity": "critical", "pool": "chat"}  # no rule_id
    assert body["counts"] == {"firing": 1, "resolved": 1}
    assert body["commonAnnotations"] == {"action": "cool it"}
    firing, resolved = body["alerts"]
    assert set(firing) == {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
    assert (firing["status"], firing["startsAt"], firing["endsAt"]) == ("firing", rfc3339(T0), "0001-01-01T00:00:00Z")
    assert (resolved["status"], resolved["endsAt"]) == ("resolved", "2025-11-29T14:01:00.000000Z")
    assert firing["labels"]["alertname"] == "Hot" and firing["labels"]["severity"] == "critical"
    assert firing["fingerprint"] == "fp-a"
    only_resolved = webhook_payload(group([alert("b", None, AlertStatus.RESOLVED)])[0], receiver="r", external_url="")
    assert only_resolved["status"] == "resolved" and only_resolved["groupLabels"] == {"alertname": "Hot"}


def test_the_signature_is_the_hmac_sha256_of_the_raw_body() -> None:
    body = encode({"version": "4", "status": "firing"})
    secret = "s3cret-of-sixteen-chars"
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert signature(body, secret) == f"sha256={expected}"
    assert verify(body, secret, f"sha256={expected}")
    assert not verify(body + b" ", secret, f"sha256={expected}")
    assert not verify(body, "another-secret-entirely", f"sha256={expected}")
    assert json.loads(body) == {"version": "4", "status": "firing"}


def test_alertmanager_alerts_end_when_resolved_or_after_their_validity() -> None:
    grouped = group([alert("a", "chat"), alert("b", "chat", AlertStatus.RESOLVED)])[0]
    firing, resolved = alertmanager_alerts(grouped, external_url="http://fp", valid_seconds=300, now=T0 + 10)
    assert firing["endsAt"] == rfc3339(T0 + 310) and resolved["endsAt"] == rfc3339(T0 + 60)
    assert set(firing) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}


def test_a_notification_carries_its_groups_other_firing_alerts_firing_first() -> None:
    resolved, new = alert("a", "chat", AlertStatus.RESOLVED), alert("b", "chat")
    firing = [alert("c", "chat"), alert("b", "chat"), alert("d", "embed"), alert("e", "chat", rule_id=2)]
    carried = with_group([resolved, new], firing)
    assert [a.labels["node"] for a in carried] == ["a", "b", "c"]  # not b twice, not another pool's or rule's
    (grouped,) = group(carried)
    assert [a.labels["node"] for a in grouped.alerts] == ["b", "c", "a"]  # firing first
    body = webhook_payload(grouped, receiver="oncall", external_url="")
    assert body["counts"] == {"firing": 2, "resolved": 1} and body["status"] == "firing"
    assert with_group([], firing) == []


def test_internal_labels_are_not_shown_and_a_forecasts_subject_moves_to_the_annotations() -> None:
    labels = {"alertname": "ForecastFailing", "severity": "warning", "rule_id": "18", "pool": "chat"}
    subject = "pool/chat/request_rate_per_second"
    failing = Alert(18, "fp", {**labels, "subject": subject}, {"action": "read it"}, AlertStatus.FIRING, None, T0, T0)
    assert visible_labels(failing.labels) == {"alertname": "ForecastFailing", "severity": "warning", "pool": "chat"}
    body = webhook_payload(group([failing])[0], receiver="r", external_url="")
    (sent,) = body["alerts"]
    assert sent["labels"] == body["commonLabels"] == visible_labels(failing.labels)
    assert sent["annotations"] == {"action": "read it", "subject": subject}
    (posted,) = alertmanager_alerts(group([failing])[0], external_url="", valid_seconds=60, now=T0)
    assert "rule_id" not in posted["labels"] and "subject" not in posted["labels"]


def test_the_generator_url_is_the_dashboard_page_of_what_the_alert_is_about() -> None:
    """It pointed at ``/api/v1/alerts?rule=N``, an API that answers only a token (issue 39): a person paged opens
    the node's page, else the pool's, else the dashboard's firing alerts, from the external URL."""
    on_node = alert_body(alert("gpu-7", "chat"), "https://fp.example.com/")
    assert on_node["generatorURL"] == "https://fp.example.com/nodes/gpu-7"
    pool_only = alert("x", "meta-llama--Llama-3.1-8B-Instruct")
    pool_only = Alert(
        1, "fp", {k: v for k, v in pool_only.labels.items() if k != "node"}, {}, AlertStatus.FIRING, 1.0, T0, T0
    )
    assert (
        alert_body(pool_only, "http://fp:8080")["generatorURL"]
        == "http://fp:8080/pools/meta-llama--Llama-3.1-8B-Instruct"
    )
    fleet_wide = Alert(1, "fp", {"alertname": "Fleet Hot", "rule_id": "1"}, {}, AlertStatus.FIRING, 1.0, T0, T0)
    assert alert_body(fleet_wide, "http://fp:8080")["generatorURL"] == "http://fp:8080/alerts?state=firing"
