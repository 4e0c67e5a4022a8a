"""One evaluation of every rule, pure: (rules, inputs, previous state, now) → (new state, transitions).

The state is each rule's active alerts (pending or firing) by fingerprint. Rules that are gone or disabled retire
their alerts (firing ones resolve and are notified). What changed is listed so the job writes only that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from alerting.conditions import verdicts
from alerting.inputs import Inputs
from alerting.lifecycle import Alert, RuleStep, Transition, retire, step
from alerting.rules import Rule

State = Mapping[int, Mapping[str, Alert]]


@dataclass(frozen=True)
class Evaluation:
    state: dict[int, dict[str, Alert]]
    transitions: list[Transition] = field(default_factory=list)
    dropped: list[Alert] = field(default_factory=list)  # pending alerts that never fired: forgotten


def evaluate(
    rules: Sequence[Rule], inputs: Inputs, previous: State, now: float, *, unseen_resolve_seconds: float
) -> Evaluation:
    result = Evaluation(state={})
    enabled = {rule.id: rule for rule in rules if rule.spec.enabled}
    for rule_id, rule in enabled.items():
        before = previous.get(rule_id, {})
        found = verdicts(rule, inputs, now)
        _merge(result, step(rule, found, before, now, unseen_resolve_seconds=unseen_resolve_seconds))
    for rule_id, alerts in previous.items():
        if rule_id not in enabled and alerts:
            _merge(result, retire(alerts, now))
    return result


def _merge(result: Evaluation, done: RuleStep) -> None:
    for alert in done.active.values():
        result.state.setdefault(alert.rule_id, {})[alert.fingerprint] = alert
    result.transitions.extend(done.transitions)
    result.dropped.extend(done.dropped)


def changed(previous: State, state: State) -> list[Alert]:
    """Active alerts that are new or differ from before: what the job writes."""
    out = []
    for rule_id, alerts in state.items():
        before = previous.get(rule_id, {})
        for fp, alert in alerts.items():
            prior = before.get(fp)
            if prior is None or _differs(prior, alert):
                out.append(alert)
    return out


def _differs(prior: Alert, alert: Alert) -> bool:
    """Worth a write: anything but the times it was last judged and last held (written with the next real change;
    the evaluator keeps the exact ones in memory)."""
    return replace(prior, last_seen_at=0.0, last_held_at=0.0) != replace(alert, last_seen_at=0.0, last_held_at=0.0)


def mark_notified(state: dict[int, dict[str, Alert]], alerts: Sequence[Alert], now: float) -> list[Alert]:
    """Record that ``alerts`` were notified at ``now`` in the state (active ones); returns them updated."""
    updated = []
    for before in alerts:
        alert = replace(before, last_notified_at=now)
        active = state.get(alert.rule_id, {})
        if alert.fingerprint in active:
            active[alert.fingerprint] = alert
        updated.append(alert)
    return updated
