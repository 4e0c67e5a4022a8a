"""Each rule kind judged purely, with plain numbers for time: one verdict per label set the inputs speak of."""

from __future__ import annotations

from typing import Any

import pytest

from alerting.conditions import Verdict, aggregate, verdicts
from alerting.defaults import DEFAULT_RULES
from alerting.inputs import ForecastView, Inputs, PoolScaling, Reading, Throttle
from alerting.rules import Aggregate, Op, Rule, RuleKind, RuleSpec
from alerting.signals import reading_values

NOW = 1_000.0


def rule(rule_id: int = 1, **fields: Any) -> Rule:
    return Rule(rule_id, RuleSpec(name="r", **fields), 1, 0.0, 0.0)


def gpu(node: str, device: int, ts: float = NOW, **values: float) -> Reading:
    return Reading(node, device, None, ts, values)


def pool(node: str, name: str, ts: float = NOW, **values: float) -> Reading:
    return Reading(node, None, name, ts, values)


def active(found: list[Verdict]) -> dict[tuple[tuple[str, str], ...], bool]:
    return {tuple(sorted(v.labels.items())): v.active for v in found}


def test_threshold_per_series_judges_fresh_readings_only() -> None:
    hot = rule(kind="threshold", metric="gpu_temperature_celsius", op=">", threshold=85)
    inputs = Inputs(
        readings=[
            gpu("a", 0, gpu_temperature_celsius=90),
            gpu("a", 1, gpu_temperature_celsius=70),
            gpu("b", 0, ts=NOW - 10, gpu_temperature_celsius=99),  # stale: no verdict, its alert keeps its state
            gpu("c", 0, gpu_utilization_ratio=0.5),  # no temperature: nothing to judge
        ],
        fresh_seconds=3,
    )
    assert active(verdicts(hot, inputs, NOW)) == {
        (("gpu", "0"), ("node", "a")): True,
        (("gpu", "1"), ("node", "a")): False,
    }


def test_the_default_crash_loop_rule_fires_on_a_pool_whose_replicas_keep_crashing() -> None:
    (spec,) = [spec for key, spec in DEFAULT_RULES if key == "replica_crash_looping"]
    readings = [
        Reading("a", None, "chat", NOW, reading_values({}, {"replica_consecutive_crashes": 3})),
        Reading("b", None, "chat", NOW, reading_values({}, {"replica_consecutive_crashes": 1})),
    ]
    found = verdicts(Rule(1, spec, 1, 0.0, 0.0), Inputs(readings=readings, fresh_seconds=3), NOW)
    assert active(found) == {(("node", "a"), ("pool", "chat")): True, (("node", "b"), ("pool", "chat")): False}


def gpu_of(node: str, device: int, name: str, **values: float) -> Reading:
    """A GPU whose sample names the pool it serves (its pod's, or a remote-write GPU series' pool label)."""
    return Reading(node, device, name, NOW, values)


def test_pool_aggregates_cover_replicas_and_the_gpus_that_serve_the_pool() -> None:
    spread = rule(
        kind="threshold", metric="gpu_utilization_ratio", op=">", threshold=0.3, group_by="pool", aggregate="spread"
    )
    inputs = Inputs(
        readings=[
            pool("a", "chat", request_rate_per_second=5),
            pool("b", "chat", request_rate_per_second=5),
            pool("c", "embed", request_rate_per_second=5),
            gpu_of("a", 0, "chat", gpu_utilization_ratio=0.9),
            gpu_of("b", 0, "chat", gpu_utilization_ratio=0.4),
            gpu_of("c", 0, "embed", gpu_utilization_ratio=0.5),
            gpu_of("c", 1, "embed", gpu_utilization_ratio=0.45),
            gpu("c", 2, gpu_utilization_ratio=0.0),  # serves no pool its sample names: not embed's
        ]
    )
    found = verdicts(spread, inputs, NOW)
    assert [(v.labels, v.active, round(v.value or 0, 3)) for v in found] == [
        ({"pool": "chat"}, True, 0.5),
        ({"pool": "embed"}, False, 0.05),
    ]
    fleet_rate = rule(
        kind="threshold", metric="request_rate_per_second", op=">=", threshold=15, group_by="fleet", aggregate="sum"
    )
    assert [(v.labels, v.active, v.value) for v in verdicts(fleet_rate, inputs, NOW)] == [({}, True, 15.0)]


def test_gpu_imbalance_judges_only_the_gpus_serving_the_pool_and_needs_two() -> None:
    """PoolGpuImbalance fired on a one-node pool (issue 39): every GPU of a remote-write node counted as the pool's,
    87 % on the GPU serving it against 12 % on one serving nothing. A spread of one GPU is no imbalance."""
    imbalance = dict(DEFAULT_RULES)["gpu_imbalance"]
    one_node = Inputs(
        readings=[
            pool("a", "chat", request_rate_per_second=5),
            gpu("a", 0, gpu_utilization_ratio=0.87),
            gpu("a", 1, gpu_utilization_ratio=0.12),
        ]
    )
    assert verdicts(Rule(1, imbalance, 1, 0.0, 0.0), one_node, NOW) == []
    one_gpu = Inputs(
        readings=[gpu_of("a", 0, "chat", gpu_utilization_ratio=0.87), gpu("a", 1, gpu_utilization_ratio=0)]
    )
    assert verdicts(Rule(1, imbalance, 1, 0.0, 0.0), one_gpu, NOW) == []
    two = Inputs(
        readings=[
            gpu_of("a", 0, "chat", gpu_utilization_ratio=0.87),
            gpu_of("b", 0, "chat", gpu_utilization_ratio=0.12),
        ]
    )
    assert active(verdicts(Rule(1, imbalance, 1, 0.0, 0.0), two, NOW)) == {(("pool", "chat"),): True}


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        (Aggregate.SUM, 2.0),
        (Aggregate.AVG, 2.0 / 3),
        (Aggregate.MAX, 0.9),
        (Aggregate.MIN, 0.4),
        (Aggregate.SPREAD, 0.5),
    ],
)
def test_aggregates(how: Aggregate, expected: float) -> None:
    assert aggregate([0.9, 0.4, 0.7], how) == pytest.approx(expected)


def test_a_pool_filter_keeps_the_pools_replicas_and_its_nodes_gpus() -> None:
    hot = rule(kind="threshold", metric="gpu_temperature_celsius", op=">", threshold=85, pool="chat")
    inputs = Inputs(
        readings=[
            pool("a", "chat", request_rate_per_second=1),
            gpu("a", 0, gpu_temperature_celsius=90),
            gpu("z", 0, gpu_temperature_celsius=95),
        ]
    )
    assert [v.labels["node"] for v in verdicts(hot, inputs, NOW)] == ["a"]


def test_windowed_rules_read_what_the_gatherer_computed_for_them() -> None:
    p99 = rule(
        7, kind="threshold", metric="network_latency_seconds", op=">", threshold=0.01, stat="p99", window_seconds=300
    )
    ecc = rule(
        8,
        kind="rate_of_change",
        metric="gpu_ecc_volatile_corrected_errors",
        op=">",
        threshold=10,
        window_seconds=3600,
    )
    inputs = Inputs(
        readings=[Reading("a", None, None, NOW, {"network_latency_seconds": 0.5})],  # the latest: not what p99 reads
        windowed={
            7: [Reading("a", None, None, NOW, {"network_latency_seconds": 0.004})],
            8: [gpu("a", 0, gpu_ecc_volatile_corrected_errors=11), gpu("a", 1, gpu_ecc_volatile_corrected_errors=2)],
        },
    )
    assert [v.active for v in verdicts(p99, inputs, NOW)] == [False]
    assert [(v.labels["gpu"], v.active) for v in verdicts(ecc, inputs, NOW)] == [("0", True), ("1", False)]


def test_predictive_fires_on_a_likely_saturation_within_the_horizon() -> None:
    soon = rule(kind="predictive", probability=0.5, horizon_seconds=900)
    inputs = Inputs(
        forecasts=[
            ForecastView("pool", "chat", "request_rate_per_second", 0.8, 600, 900),
            ForecastView("pool", "embed", "request_rate_per_second", 0.3, None, 900),
            ForecastView("pool", "later", "request_rate_per_second", 0.9, 1800, 3600),  # likely, but after 15 min
            ForecastView("pool", "stale", "request_rate_per_second", 0.99, 60, 900, error="timeout"),
            ForecastView("device", "a/0", "gpu_memory_used_bytes", 0.99, 60, 900),  # another subject kind
        ]
    )
    assert active(verdicts(soon, inputs, NOW)) == {
        (("pool", "chat"),): True,
        (("pool", "embed"),): False,
        (("pool", "later"),): False,
    }
    memory = rule(kind="predictive", probability=0.5, horizon_seconds=900, subject_kind="device")
    assert active(verdicts(memory, inputs, NOW)) == {(("gpu", "0"), ("node", "a")): True}


def test_absent_nodes_and_metrics() -> None:
    down = rule(kind="absent", silent_seconds=30)
    inputs = Inputs(
        readings=[
            gpu("a", 0, gpu_utilization_ratio=0.5),
            Reading("b", None, None, NOW, {"network_latency_seconds": 1}),
        ],
        node_last_seen={"a": NOW - 1, "b": NOW - 1, "gone": NOW - 31},
        up_nodes=frozenset({"a", "b"}),
    )
    assert active(verdicts(down, inputs, NOW)) == {
        (("node", "a"),): False,
        (("node", "b"),): False,
        (("node", "gone"),): True,
    }
    no_gpu_metric = rule(kind="absent", metric="gpu_utilization_ratio")
    assert active(verdicts(no_gpu_metric, inputs, NOW)) == {(("node", "a"),): False, (("node", "b"),): True}


def test_event_rules_name_what_is_happening() -> None:
    inputs = Inputs(
        pools=[
            PoolScaling("chat", desired=4, ready=2, last_failed_ts=NOW - 100),
            PoolScaling("embed", desired=2, ready=2, last_failed_ts=NOW - 400),
            PoolScaling("new", desired=None, ready=0),
            PoolScaling("advised", desired=5, ready=1, applied=False),  # dry run or an HPA: ready ≠ desired by design
        ],
        throttles=[Throttle("bulk", "a", "chat", NOW - 10), Throttle("old", "a", "chat", NOW - 900)],
        forecasts=[
            ForecastView("pool", "chat", "request_rate_per_second", None, None, None, error="fit failed"),
            ForecastView("pool", "embed", "request_rate_per_second", 0.1, None, 900),
            ForecastView("pool", "new", "request_rate_per_second", None, None, None, "too short", warming_up=True),
        ],
    )
    failed = rule(kind="event", event="scaling_failed", window_seconds=300)
    assert active(verdicts(failed, inputs, NOW)) == {(("pool", "chat"),): True}
    stuck = rule(kind="event", event="scaling_stuck")
    assert active(verdicts(stuck, inputs, NOW)) == {(("pool", "chat"),): True, (("pool", "embed"),): False}
    throttled = rule(kind="event", event="quota_enforced", window_seconds=300)
    assert active(verdicts(throttled, inputs, NOW)) == {(("node", "a"), ("pool", "chat"), ("tenant", "bulk")): True}
    failing = rule(kind="event", event="forecast_failing")
    assert [v.labels for v in verdicts(failing, inputs, NOW)] == [
        {"pool": "chat", "subject": "pool/chat/request_rate_per_second"}
    ]


def test_a_latency_rule_holds_each_pool_to_its_own_slo() -> None:
    spec = RuleSpec(
        name="NearSlo", kind=RuleKind.THRESHOLD, metric="request_latency_p99_seconds", op=Op.GT, slo_ratio=0.8
    )
    rule = Rule(9, spec, 1, 0.0, 0.0)
    now = 1_000.0
    inputs = Inputs(
        readings=[
            Reading("a", None, "chat", now, {"request_latency_p99_seconds": 7.0}),  # 0.7 of chat's 10 s SLO
            Reading("a", None, "vision", now, {"request_latency_p99_seconds": 0.09}),  # 0.9 of vision's 100 ms
            Reading("a", None, "batch", now, {"request_latency_p99_seconds": 99.0}),  # a pool with no SLO known
        ],
        slo_p99_seconds={"chat": 10.0, "vision": 0.1},
    )
    found = {v.labels["pool"]: v.active for v in verdicts(rule, inputs, now)}
    assert found == {"chat": False, "vision": True}
