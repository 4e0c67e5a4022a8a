"""What goes on the wire (CONTRACT section 10): Alertmanager-compatible webhook payloads (``"version": "4"``), their
HMAC-SHA256 signature, and the ``/api/v2/alerts`` body of an Alertmanager sink. Pure functions of alerts and time.

Notifications are grouped by rule and pool, as Alertmanager's ``group_by: [alertname, pool]`` would: one evaluation's
transitions that share both travel together, with the group's other firing alerts (:func:`with_group`), so a receiver
sees "3 nodes" in one notification, firing ones first, and the counts. What a receiver sees has no internal labels
(:func:`visible_labels`): ``rule_id`` (``alertname`` names the rule) and ``subject`` (a forecast's, whose node
and pool labels say it again; it moves to the annotations). An alert's ``generatorURL`` is the dashboard page of
what it is about. Alertmanager is told each firing alert's end a few evaluations ahead and told again before then
(:func:`alertmanager_alerts`), as Prometheus does, so the alerts of a fleetpilot that died end within minutes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from alerting.lifecycle import Alert, AlertStatus

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "no end" for a firing alert
SIGNATURE_HEADER = "X-Fleetpilot-Signature"
DELIVERY_HEADER = "X-Fleetpilot-Delivery"
PAYLOAD_VERSION = "4"
INTERNAL_LABELS = frozenset({"rule_id", "subject"})  # identity in our store, noise to a person paged


def rfc3339(ts: float) -> str:
    """1764424800.5 → "2025-11-29T14:00:00.500000Z"."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Group:
    """Alerts of one rule and pool notified together; ``key`` identifies the group across notifications."""

    rule_id: int
    rule_name: str
    pool: str
    alerts: tuple[Alert, ...]

    @property
    def key(self) -> str:
        return f'{{}}:{{alertname="{self.rule_name}",pool="{self.pool}",rule_id="{self.rule_id}"}}'

    @property
    def labels(self) -> dict[str, str]:
        labels = {"alertname": self.rule_name}
        if self.pool:
            labels["pool"] = self.pool
        return labels

    @property
    def firing(self) -> int:
        return sum(1 for a in self.alerts if a.status is not AlertStatus.RESOLVED)


def _group_key(alert: Alert) -> tuple[int, str]:
    return alert.rule_id, alert.labels.get("pool", "")


def group(alerts: Sequence[Alert]) -> list[Group]:
    """By (rule, pool), in first-seen order; within a group the firing alerts first, each part in its given order."""
    groups: dict[tuple[int, str], list[Alert]] = {}
    for alert in alerts:
        groups.setdefault(_group_key(alert), []).append(alert)
    return [
        Group(rule_id, members[0].labels.get("alertname", ""), pool, tuple(sorted(members, key=_resolved_last)))
        for (rule_id, pool), members in groups.items()
    ]


def _resolved_last(alert: Alert) -> bool:
    return alert.status is AlertStatus.RESOLVED


def with_group(notified: Sequence[Alert], firing: Iterable[Alert]) -> list[Alert]:
    """``notified`` and, after them, the other ``firing`` alerts of their groups (rule and pool): a notification
    carries its whole group, as Alertmanager's does, not only what changed this evaluation."""
    if not notified:
        return []  # nothing to say: ``firing`` is not even read
    touched = {_group_key(a) for a in notified}
    known = {(a.rule_id, a.fingerprint) for a in notified}
    others = [a for a in firing if _group_key(a) in touched and (a.rule_id, a.fingerprint) not in known]
    return [*notified, *sorted(others, key=lambda a: sorted(a.labels.items()))]


def visible_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a person reads: all but :data:`INTERNAL_LABELS`."""
    return {k: v for k, v in labels.items() if k not in INTERNAL_LABELS}


def visible_annotations(alert: Alert) -> dict[str, str]:
    """The rule's annotations, and the forecast ``subject`` a forecast_failing alert names ("pool/chat/...")."""
    subject = alert.labels.get("subject")
    return {**alert.annotations, "subject": subject} if subject is not None else dict(alert.annotations)


def _common(maps: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The pairs every map has with the same value."""
    if not maps:
        return {}
    common = dict(maps[0])
    for m in maps[1:]:
        common = {k: v for k, v in common.items() if m.get(k) == v}
    return common


def alert_body(alert: Alert, external_url: str) -> dict[str, Any]:
    resolved = alert.status is AlertStatus.RESOLVED
    return {
        "status": "resolved" if resolved else "firing",
        "labels": visible_labels(alert.labels),
        "annotations": visible_annotations(alert),
        "startsAt": rfc3339(alert.fired_at if alert.fired_at is not None else alert.active_since),
        "endsAt": rfc3339(alert.resolved_at) if resolved and alert.resolved_at is not None else ZERO_TIME,
        "generatorURL": generator_url(alert.labels, external_url),
        "fingerprint": alert.fingerprint,
    }


def generator_url(labels: Mapping[str, str], external_url: str) -> str:
    """The dashboard page a person paged opens: the node's (``https://fp/nodes/gpu-7``), else the pool's
    (``/pools/chat``), else the firing alerts (``/alerts?state=firing``); absolute from the external URL. It was the
    alerts API, which answers only a token."""
    base = external_url.rstrip("/")
    if "node" in labels:
        return f"{base}/nodes/{quote(labels['node'], safe='')}"
    if "pool" in labels:
        return f"{base}/pools/{quote(labels['pool'], safe='')}"
    return f"{base}/alerts?state=firing"


def webhook_payload(grouped: Group, *, receiver: str, external_url: str) -> dict[str, Any]:
    """The Alertmanager webhook body (version 4) of one group notification to ``receiver``, with ``counts`` (its
    firing and resolved alerts: "3 firing") beside Alertmanager's fields."""
    alerts = [alert_body(a, external_url) for a in grouped.alerts]
    return {
        "version": PAYLOAD_VERSION,
        "groupKey": grouped.key,
        "truncatedAlerts": 0,
        "status": "firing" if grouped.firing else "resolved",
        "receiver": receiver,
        "groupLabels": grouped.labels,
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": external_url,
        "counts": {"firing": grouped.firing, "resolved": len(alerts) - grouped.firing},
        "alerts": alerts,
    }


def alertmanager_alerts(grouped: Group, *, external_url: str, valid_seconds: float, now: float) -> list[dict[str, Any]]:
    """Postable alerts for Alertmanager's ``POST /api/v2/alerts``: a firing alert ends ``valid_seconds`` from now
    unless sent again (Alertmanager resolves it then), a resolved one at its resolution time."""
    out = []
    for alert in grouped.alerts:
        body = alert_body(alert, external_url)
        ends = alert.resolved_at if alert.status is AlertStatus.RESOLVED else now + valid_seconds
        out.append(
            {
                "labels": body["labels"],
                "annotations": body["annotations"],
                "startsAt": body["startsAt"],
                "endsAt": rfc3339(ends if ends is not None else now),
                "generatorURL": body["generatorURL"],
            }
        )
    return out


def encode(body: object) -> bytes:
    """The exact bytes sent (and signed): compact JSON, keys in order."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def signature(body: bytes, secret: str) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body with the secret>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str) -> bool:
    """What a receiver does: recompute the signature and compare in constant time."""
    return hmac.compare_digest(signature(body, secret), header)
