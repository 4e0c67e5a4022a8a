"""The default pack replayed through the evaluator on ten minutes of recorded demo traffic (tests/alerting/data/):
none of issue 22's false alarms fires, no alert flaps, and a real overload injected into the same traffic does fire.

The recording is what the evaluator's gather read from a live ``fleetpilot demo`` once a second
(:mod:`tests.alerting.demo_recording`): three nodes on loopback of a loaded 2-core machine, chat (SLO 10 s) and
vision (SLO 1 s) under the replayed Azure trace, from the first second, so the forecaster's warm-up is in it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pytest

from alerting.defaults import DEFAULT_RULES
from alerting.evaluate import evaluate
from alerting.inputs import Inputs
from alerting.lifecycle import Alert, AlertStatus, TransitionKind
from alerting.rules import Rule, RuleSpec
from tests.alerting.demo_recording import Tick, load

T0 = 1_800_000_000.0
UNSEEN_RESOLVE_SECONDS = 600.0  # EvaluatorSettings' default
PACK_1_P99 = "P99LatencyHigh"  # pack 1's critical rule: p99 above a fixed 500 ms for 1 minute
RULES = [Rule(i, spec, 1, 0.0, 0.0, key) for i, (key, spec) in enumerate(DEFAULT_RULES, start=1)]
NETWORK = "network_latency_seconds"
Alter = Callable[[Inputs, Tick], Inputs]
Key = tuple[str, tuple[tuple[str, str], ...]]  # alertname, the other labels but severity and rule_id


@dataclass
class Replay:
    """What the pack did over the recording: each alert's transitions and the ticks it went pending."""

    fired: Counter[Key] = field(default_factory=Counter)
    resolved: Counter[Key] = field(default_factory=Counter)
    pending: list[tuple[float, Alert]] = field(default_factory=list)
    first_fired_at: dict[Key, float] = field(default_factory=dict)

    def fired_names(self) -> set[str]:
        return {name for name, _ in self.fired}

    def of(self, name: str, **labels: str) -> int:
        return sum(n for (rule, key), n in self.fired.items() if rule == name and labels.items() <= dict(key).items())


def _key(alert: Alert) -> Key:
    scope = sorted((k, v) for k, v in alert.labels.items() if k not in ("alertname", "severity", "rule_id"))
    return alert.labels["alertname"], tuple(scope)


def replay(ticks: Sequence[Tick], rules: Sequence[Rule] = RULES, alter: Alter | None = None) -> Replay:
    ids = {rule.spec.name: rule.id for rule in rules}
    out = Replay()
    state: dict[int, dict[str, Alert]] = {}
    for tick in ticks:
        windowed = {ids[name]: rs for name, rs in tick.windowed.items() if name in ids}
        inputs = replace(tick.inputs, windowed=windowed)
        if alter is not None:
            inputs = alter(inputs, tick)
        now = T0 + tick.at
        result = evaluate(rules, inputs, state, now, unseen_resolve_seconds=UNSEEN_RESOLVE_SECONDS)
        for t in result.transitions:
            if t.kind is TransitionKind.FIRING:
                out.fired[_key(t.alert)] += 1
                out.first_fired_at.setdefault(_key(t.alert), tick.at)
            elif t.kind is TransitionKind.RESOLVED:
                out.resolved[_key(t.alert)] += 1
        for rule_id, alerts in result.state.items():
            for fp, alert in alerts.items():
                if alert.status is AlertStatus.PENDING and fp not in state.get(rule_id, {}):
                    out.pending.append((tick.at, alert))
        state = result.state
    return out


@pytest.fixture(scope="module")
def ticks() -> list[Tick]:
    return load(t0=T0)


@pytest.fixture(scope="module")
def pack(ticks: list[Tick]) -> Replay:
    return replay(ticks)


def _spec(key: str) -> RuleSpec:
    return dict(DEFAULT_RULES)[key]


def _changed(metric: str, pool: str, how: Callable[[float], float]) -> Alter:
    """Every reading of ``pool`` with ``metric`` turned by ``how``."""

    def alter(inputs: Inputs, _tick: Tick) -> Inputs:
        readings = [
            replace(r, values={**r.values, metric: how(r.values[metric])})
            if r.pool == pool and metric in r.values
            else r
            for r in inputs.readings
        ]
        return replace(inputs, readings=readings)

    return alter


def _scaled(metric: str, pool: str, factor: float) -> Alter:
    return _changed(metric, pool, lambda v: v * factor)


def _capped(metric: str, pool: str, cap: float) -> Alter:
    return _changed(metric, pool, lambda v: min(v, cap))


def _slo_first_broken(ticks: Sequence[Tick], pool: str, slo: float) -> dict[str, float]:
    """When each node's p99 of ``pool`` first passed ``slo`` (the recording's end for one that never did)."""
    nodes = {r.node for t in ticks for r in t.inputs.readings if r.pool == pool}
    found = dict.fromkeys(nodes, ticks[-1].at)
    for tick in reversed(ticks):
        for r in tick.inputs.readings:
            if r.pool == pool and r.values.get("request_latency_p99_seconds", 0.0) > slo:
                found[r.node] = tick.at
    return found


def test_the_recording_is_ten_minutes_of_the_demo(ticks: list[Tick]) -> None:
    assert len(ticks) >= 500 and ticks[-1].at >= 590
    assert ticks[-1].inputs.slo_p99_seconds == {"chat": 10.0, "vision": 1.0}
    assert {r.node for t in ticks for r in t.inputs.readings} == {"demo-node-1", "demo-node-2", "demo-node-3"}


def test_chat_is_paged_only_once_its_node_breaks_the_10_s_slo(ticks: list[Tick], pack: Replay) -> None:
    """On the loaded machine of the recording every chat node does break its SLO (p99 of tens of seconds in the
    demo's bursts): that page is right, and it comes only after the break."""
    for node, broke_at in _slo_first_broken(ticks, "chat", 10.0).items():
        key = ("P99LatencyAboveSlo", (("node", node), ("pool", "chat")))
        assert pack.first_fired_at.get(key, broke_at) >= broke_at


def test_chat_at_half_a_second_is_not_paged_as_pack_1s_500_ms_rule_did(ticks: list[Tick], pack: Replay) -> None:
    """The issue's false alarm: chat's recorded p99, with its gaps and timing, held at 600 ms (what the issue saw;
    the loaded machine of the recording was slower); pack 1's fixed 500 ms pages every node, pack 3 none."""
    fixed = replace(_spec("p99_latency_high"), name=PACK_1_P99, slo_ratio=None, threshold=0.5)
    pack_1 = [*RULES, Rule(99, fixed, 1, 0.0, 0.0)]
    calm = _capped("request_latency_p99_seconds", "chat", 0.6)
    old, new = replay(ticks, pack_1, calm), replay(ticks, alter=calm)
    assert old.of(PACK_1_P99, pool="chat") == 3
    assert new.of("P99LatencyAboveSlo", pool="chat") == new.of("P99LatencyNearSlo", pool="chat") == 0


def test_network_latency_on_loopback_does_not_fire(pack: Replay) -> None:
    """The pushes' round trips on loopback reach a second at the tail (a busy collector) but their floor is ~5 ms;
    only a just-started agent's first minute has a slow floor, and it does not last the rule's 5 minutes."""
    assert "NetworkLatencyHigh" not in pack.fired_names()
    assert all(at < 120 for at, a in pack.pending if a.labels["alertname"] == "NetworkLatencyHigh")


def test_forecast_failing_is_not_pending_during_the_forecasters_warm_up(ticks: list[Tick], pack: Replay) -> None:
    warming = [t.at for t in ticks if any(f.warming_up for f in t.inputs.forecasts)]
    assert warming and warming[-1] >= 60, "the recording should hold the forecaster's warm-up"
    assert not [a for _, a in pack.pending if a.labels["alertname"] == "ForecastFailing"]

    def failing(inputs: Inputs, _tick: Tick) -> Inputs:  # the same errors from a forecaster that was warmed up
        return replace(inputs, forecasts=[replace(f, warming_up=False) for f in inputs.forecasts])

    broken = replay(ticks, alter=failing)
    assert [a for _, a in broken.pending if a.labels["alertname"] == "ForecastFailing"]


def test_no_alert_flaps_over_the_recording(pack: Replay) -> None:
    assert pack.fired and all(n == 1 for n in pack.fired.values()), pack.fired  # pending → firing → resolved once


def test_what_fires_in_the_demo_is_the_reviewed_set(pack: Replay) -> None:
    """docs/operations.md says which rules fire in the demo and why; this is that list."""
    assert pack.fired_names() == {"P99LatencyAboveSlo", "P99LatencyNearSlo", "SaturationPredicted"}
    assert {dict(labels).get("pool") for _, labels in pack.fired} == {"chat"}


def test_a_real_overload_injected_into_the_same_traffic_fires(ticks: list[Tick], pack: Replay) -> None:
    assert pack.of("P99LatencyAboveSlo", pool="vision") == 0
    overloaded = replay(ticks, alter=_scaled("request_latency_p99_seconds", "vision", 20.0))  # 0.1 s → 2 s
    assert overloaded.of("P99LatencyAboveSlo", pool="vision") >= 1
    assert overloaded.of("P99LatencyNearSlo", pool="vision") >= 1

    def slow_path(inputs: Inputs, _tick: Tick) -> Inputs:  # every push 80 ms slower: a path, not a busy collector
        windowed = {
            rule_id: [replace(r, values={k: v + 0.080 if k == NETWORK else v for k, v in r.values.items()}) for r in rs]
            for rule_id, rs in inputs.windowed.items()
        }
        return replace(inputs, windowed=windowed)

    assert replay(ticks, alter=slow_path).of("NetworkLatencyHigh") >= 1
