"""The alert lifecycle, pure: pending → firing → resolved, one alert per rule and label set (its fingerprint).

Per evaluation and rule, given the verdicts and the rule's active alerts (pending or firing):
- a verdict that holds starts a pending alert (firing at once when ``for_seconds`` is 0); a pending alert whose
  condition held for ``for_seconds`` fires;
- a verdict that no longer holds drops a pending alert (nothing was said about it) and resolves a firing one, at
  the first evaluation whose fresh readings no longer meet the condition — or, with ``keep_firing_seconds``, the
  first one that long after the condition last held (held again meanwhile, the alert just goes on firing);
- no verdict (no fresh reading): a pending alert is dropped (the condition must hold throughout), a firing one is
  held until ``unseen_resolve_seconds`` pass without a verdict, then resolved; for event rules, no verdict means
  the event is over, so a firing alert resolves at once;
- a firing alert not notified for ``repeat_interval_seconds`` is notified again (``repeat``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from alerting.conditions import Verdict
from alerting.rules import Rule, RuleKind


class AlertStatus(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class TransitionKind(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"
    REPEAT = "repeat"


@dataclass(frozen=True)
class Alert:
    rule_id: int
    fingerprint: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    status: AlertStatus
    value: float | None
    active_since: float  # the first evaluation of this episode at which the condition held
    last_seen_at: float  # the last evaluation that had a verdict for it
    fired_at: float | None = None
    resolved_at: float | None = None
    last_notified_at: float | None = None
    id: int | None = None
    last_held_at: float | None = None  # the last evaluation at which the condition held (keep_firing_seconds)


@dataclass(frozen=True)
class Transition:
    kind: TransitionKind
    alert: Alert


@dataclass(frozen=True)
class RuleStep:
    """One rule's evaluation: its active alerts after it, what changed, and the pending alerts dropped."""

    active: dict[str, Alert]
    transitions: list[Transition] = field(default_factory=list)
    dropped: list[Alert] = field(default_factory=list)


def alert_labels(rule: Rule, scope: Mapping[str, str]) -> dict[str, str]:
    """The rule's identity and severity, its own labels, then the scope (node, gpu, pool, tenant, subject)."""
    return {
        "alertname": rule.spec.name,
        "severity": rule.spec.severity.value,
        "rule_id": str(rule.id),
        **rule.spec.labels,
        **scope,
    }


def fingerprint(labels: Mapping[str, str]) -> str:
    """16 hex digits of the SHA-256 of the sorted label set (Alertmanager fingerprints are 16 hex digits too)."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def step(
    rule: Rule, found: Sequence[Verdict], previous: Mapping[str, Alert], now: float, *, unseen_resolve_seconds: float
) -> RuleStep:
    result = RuleStep(active={})
    seen: set[str] = set()
    for verdict in found:
        labels = alert_labels(rule, verdict.labels)
        fp = fingerprint(labels)
        seen.add(fp)
        _judged(rule, verdict, labels, fp, previous.get(fp), now, result)
    for fp, alert in previous.items():
        if fp not in seen:
            _unjudged(rule, alert, now, unseen_resolve_seconds, result)
    return result


def _judged(
    rule: Rule, verdict: Verdict, labels: dict[str, str], fp: str, prior: Alert | None, now: float, out: RuleStep
) -> None:
    if not verdict.active:
        if prior is not None and prior.status is AlertStatus.FIRING:
            held = prior.last_held_at if prior.last_held_at is not None else prior.last_seen_at
            if now - held < rule.spec.keep_firing_seconds:  # quiet for less than the hysteresis: still firing
                out.active[fp] = replace(prior, value=verdict.value, last_seen_at=now)
                if _repeat_due(rule, prior, now):
                    out.transitions.append(Transition(TransitionKind.REPEAT, out.active[fp]))
                return
            out.transitions.append(Transition(TransitionKind.RESOLVED, _resolved(prior, verdict.value, now)))
        elif prior is not None:
            out.dropped.append(prior)
        return
    if prior is None:
        prior = Alert(rule.id, fp, labels, dict(rule.spec.annotations), AlertStatus.PENDING, None, now, now)
    alert = replace(
        prior, value=verdict.value, last_seen_at=now, last_held_at=now, annotations=dict(rule.spec.annotations)
    )
    if alert.status is AlertStatus.PENDING and now - alert.active_since >= rule.spec.for_seconds:
        alert = replace(alert, status=AlertStatus.FIRING, fired_at=now)
        out.transitions.append(Transition(TransitionKind.FIRING, alert))
    elif _repeat_due(rule, alert, now):
        out.transitions.append(Transition(TransitionKind.REPEAT, alert))
    out.active[fp] = alert


def _unjudged(rule: Rule, alert: Alert, now: float, unseen_resolve_seconds: float, out: RuleStep) -> None:
    if alert.status is not AlertStatus.FIRING:
        out.dropped.append(alert)
    elif rule.spec.kind is RuleKind.EVENT or now - alert.last_seen_at >= unseen_resolve_seconds:
        out.transitions.append(Transition(TransitionKind.RESOLVED, _resolved(alert, alert.value, now)))
    else:
        out.active[alert.fingerprint] = alert
        if _repeat_due(rule, alert, now):
            out.transitions.append(Transition(TransitionKind.REPEAT, alert))


def _repeat_due(rule: Rule, alert: Alert, now: float) -> bool:
    if alert.status is not AlertStatus.FIRING:
        return False
    last = alert.last_notified_at
    return last is None or now - last >= rule.spec.repeat_interval_seconds


def _resolved(alert: Alert, value: float | None, now: float) -> Alert:
    return replace(alert, status=AlertStatus.RESOLVED, value=value, resolved_at=now, last_seen_at=now)


def retire(alerts: Mapping[str, Alert], now: float) -> RuleStep:
    """A rule deleted or disabled: its firing alerts resolve (and are notified), its pending ones are dropped."""
    result = RuleStep(active={})
    for alert in alerts.values():
        if alert.status is AlertStatus.FIRING:
            result.transitions.append(Transition(TransitionKind.RESOLVED, _resolved(alert, alert.value, now)))
        else:
            result.dropped.append(alert)
    return result
