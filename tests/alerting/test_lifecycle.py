"""The lifecycle through the pure evaluation: pending → firing → resolved, holds, repeats, retired rules."""

from __future__ import annotations

from typing import Any

from alerting.evaluate import State, changed, evaluate, mark_notified
from alerting.inputs import ForecastView, Inputs, Reading
from alerting.lifecycle import AlertStatus, Transition, TransitionKind, alert_labels, fingerprint
from alerting.rules import EventKind, Rule, RuleKind, RuleSpec, Severity

T0 = 1_000.0


def hot_rule(**fields: Any) -> Rule:
    spec = {"kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": 85, **fields}
    return Rule(3, RuleSpec(name="Hot", severity=Severity.CRITICAL, **spec), 1, 0.0, 0.0)


def temps(now: float, **by_node: float | None) -> Inputs:
    """A fresh reading per node with its temperature (None: no fresh reading at all)."""
    return Inputs(
        readings=[
            Reading(node, 0, None, now, {"gpu_temperature_celsius": t}) for node, t in by_node.items() if t is not None
        ]
    )


class Run:
    """Evaluations in sequence, each notified at once (as the job does without silences)."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self.state: State = {}

    def at(self, now: float, inputs: Inputs) -> list[Transition]:
        result = evaluate(self.rules, inputs, self.state, now, unseen_resolve_seconds=600)
        mark_notified(result.state, [t.alert for t in result.transitions], now)
        self.state = result.state
        return result.transitions

    def status(self, node: str = "a") -> AlertStatus | None:
        for alerts in self.state.values():
            for alert in alerts.values():
                if alert.labels.get("node") == node:
                    return alert.status
        return None


def kinds(transitions: list[Transition]) -> list[tuple[str, str]]:
    return [(t.kind.value, t.alert.labels["node"]) for t in transitions]


def test_pending_then_firing_after_for_seconds_then_resolved_at_the_first_fresh_sample_below() -> None:
    run = Run([hot_rule(for_seconds=60)])
    assert run.at(T0, temps(T0, a=90)) == [] and run.status() is AlertStatus.PENDING
    assert run.at(T0 + 30, temps(T0 + 30, a=91)) == [] and run.status() is AlertStatus.PENDING
    fired = run.at(T0 + 60, temps(T0 + 60, a=92))
    assert kinds(fired) == [("firing", "a")]
    alert = fired[0].alert
    assert (alert.active_since, alert.fired_at, alert.value) == (T0, T0 + 60, 92)
    assert alert.labels == {"alertname": "Hot", "severity": "critical", "rule_id": "3", "node": "a", "gpu": "0"}
    assert alert.fingerprint == fingerprint(alert.labels)
    assert run.at(T0 + 61, temps(T0 + 61, a=93)) == []  # de-duplicated: still firing, nothing new to say
    resolved = run.at(T0 + 62, temps(T0 + 62, a=80))
    assert kinds(resolved) == [("resolved", "a")] and resolved[0].alert.resolved_at == T0 + 62
    assert run.state == {}


def test_a_pending_alert_whose_condition_lapses_is_dropped_without_a_word() -> None:
    run = Run([hot_rule(for_seconds=60)])
    run.at(T0, temps(T0, a=90))
    result = evaluate(run.rules, temps(T0 + 10, a=80), run.state, T0 + 10, unseen_resolve_seconds=600)
    assert result.transitions == [] and [a.status for a in result.dropped] == [AlertStatus.PENDING]
    assert result.state == {}


def test_no_fresh_reading_holds_a_firing_alert_until_the_unseen_timeout() -> None:
    run = Run([hot_rule()])
    assert kinds(run.at(T0, temps(T0, a=90))) == [("firing", "a")]
    assert run.at(T0 + 5, temps(T0 + 5, a=None)) == [] and run.status() is AlertStatus.FIRING
    assert kinds(run.at(T0 + 600, temps(T0 + 600, a=None))) == [("resolved", "a")]


def test_a_firing_alert_is_notified_again_each_repeat_interval() -> None:
    run = Run([hot_rule(repeat_interval_seconds=100)])
    run.at(T0, temps(T0, a=90))
    assert run.at(T0 + 99, temps(T0 + 99, a=90)) == []
    assert kinds(run.at(T0 + 100, temps(T0 + 100, a=90))) == [("repeat", "a")]
    assert run.at(T0 + 150, temps(T0 + 150, a=90)) == []


def test_one_alert_per_label_set_each_with_its_own_lifecycle() -> None:
    run = Run([hot_rule()])
    assert sorted(kinds(run.at(T0, temps(T0, a=90, b=95, c=20)))) == [("firing", "a"), ("firing", "b")]
    assert kinds(run.at(T0 + 1, temps(T0 + 1, a=90, b=70, c=99))) == [("resolved", "b"), ("firing", "c")]


def test_a_deleted_or_disabled_rule_resolves_its_firing_alerts() -> None:
    run = Run([hot_rule()])
    run.at(T0, temps(T0, a=90))
    run.rules = [Rule(3, RuleSpec(**{**vars(hot_rule().spec), "enabled": False}), 2, 0.0, 0.0)]
    assert kinds(run.at(T0 + 1, temps(T0 + 1, a=90))) == [("resolved", "a")]
    run.rules = []
    assert run.at(T0 + 2, temps(T0 + 2, a=90)) == []


def test_event_alerts_resolve_when_the_event_is_no_longer_named() -> None:
    stuck = Rule(9, RuleSpec(name="Stuck", kind=RuleKind.EVENT, event=EventKind.FORECAST_FAILING), 1, 0.0, 0.0)

    failing = Inputs(forecasts=[ForecastView("pool", "chat", "request_rate_per_second", None, None, None, "boom")])
    run = Run([stuck])
    assert [t.kind for t in run.at(T0, failing)] == [TransitionKind.FIRING]
    assert [t.kind for t in run.at(T0 + 1, Inputs())] == [TransitionKind.RESOLVED]


def test_only_what_changed_is_written() -> None:
    run = Run([hot_rule()])
    run.at(T0, temps(T0, a=90))
    before = run.state
    result = evaluate(run.rules, temps(T0 + 1, a=90), before, T0 + 1, unseen_resolve_seconds=600)
    assert changed(before, result.state) == []  # only last_seen_at moved
    result = evaluate(run.rules, temps(T0 + 2, a=97), before, T0 + 2, unseen_resolve_seconds=600)
    assert [a.value for a in changed(before, result.state)] == [97]


def test_labels_put_the_rule_first_and_the_scope_last() -> None:
    rule = hot_rule(labels={"team": "infra"})
    assert alert_labels(rule, {"node": "a"}) == {
        "alertname": "Hot",
        "severity": "critical",
        "rule_id": "3",
        "team": "infra",
        "node": "a",
    }


def test_keep_firing_holds_a_firing_alert_through_a_quiet_spell_shorter_than_it() -> None:
    run = Run([hot_rule(keep_firing_seconds=300)])
    assert kinds(run.at(T0, temps(T0, a=90))) == [("firing", "a")]
    assert run.at(T0 + 60, temps(T0 + 60, a=80)) == [] and run.status() is AlertStatus.FIRING  # quiet 60 s < 300
    assert run.at(T0 + 120, temps(T0 + 120, a=95)) == []  # held again: the same alert goes on, no re-fire
    assert run.at(T0 + 400, temps(T0 + 400, a=80)) == [] and run.status() is AlertStatus.FIRING  # 280 s since held
    resolved = run.at(T0 + 420, temps(T0 + 420, a=80))  # 300 s since it last held
    assert kinds(resolved) == [("resolved", "a")] and resolved[0].alert.resolved_at == T0 + 420


def test_without_keep_firing_the_first_fresh_sample_below_resolves() -> None:
    run = Run([hot_rule()])
    run.at(T0, temps(T0, a=90))
    assert kinds(run.at(T0 + 1, temps(T0 + 1, a=80))) == [("resolved", "a")]
