"""Rule validation: each kind's required fields, and a refusal that names the field at fault."""

from __future__ import annotations

from typing import Any

import pytest

from alerting.defaults import DEFAULT_RULES
from alerting.rules import RuleKind, RuleSpec, spec_columns


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "threshold", "metric": "nope", "op": ">", "threshold": 1}, "metric"),
        ({"kind": "threshold", "metric": "gpu_utilization_ratio", "threshold": 1}, "op"),
        ({"kind": "threshold", "metric": "gpu_utilization_ratio", "op": "=>", "threshold": 1}, "op"),
        ({"kind": "threshold", "metric": "gpu_utilization_ratio", "op": ">", "threshold": float("nan")}, "threshold"),
        (
            {"kind": "threshold", "metric": "gpu_utilization_ratio", "op": ">", "threshold": 1, "group_by": "pool"},
            "aggregate",
        ),
        (
            {
                "kind": "threshold",
                "metric": "host_cpu_ratio",
                "op": ">",
                "threshold": 1,
                "stat": "p99",
                "window_seconds": 60,
            },
            "stat",
        ),
        (
            {"kind": "threshold", "metric": "gpu_utilization_ratio", "op": ">", "threshold": 1, "for_seconds": -1},
            "for_seconds",
        ),
        ({"kind": "rate_of_change", "metric": "gpu_power_watts", "op": ">", "threshold": 1}, "window_seconds"),
        ({"kind": "predictive", "probability": 1.5, "horizon_seconds": 900}, "probability"),
        ({"kind": "predictive", "probability": 0.5}, "horizon_seconds"),
        ({"kind": "absent"}, "silent_seconds"),
        ({"kind": "event"}, "event"),
        ({"kind": "event", "event": "quota_enforced"}, "window_seconds"),
        ({"kind": "sideways"}, "kind"),
        ({"kind": "absent", "silent_seconds": 5, "labels": {"severity": "x"}}, "labels"),
        ({"kind": "absent", "silent_seconds": 5, "severity": "page"}, "severity"),
        ({"kind": "absent", "silent_seconds": 5, "keep_firing_seconds": -1}, "keep_firing_seconds"),
        ({"kind": "threshold", "metric": "gpu_utilization_ratio", "op": ">", "slo_ratio": 0.8}, "slo_ratio"),
        (
            {"kind": "threshold", "metric": "request_latency_p99_seconds", "op": ">", "slo_ratio": 1, "threshold": 2},
            "threshold",
        ),
        ({"kind": "threshold", "metric": "request_latency_p99_seconds", "op": ">", "slo_ratio": 0}, "slo_ratio"),
        ({"kind": "absent", "silent_seconds": 5, "slo_ratio": 1}, "slo_ratio"),
    ],
)
def test_a_rule_that_cannot_hold_names_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        RuleSpec(name="r", **fields)


def test_every_default_rule_is_valid_enabled_and_says_what_to_do() -> None:
    keys = [key for key, _spec in DEFAULT_RULES]
    assert len(keys) == len(set(keys)) >= 12
    for _key, spec in DEFAULT_RULES:
        assert spec.enabled and spec.annotations["action"] and spec.annotations["summary"]
        assert RuleSpec(**spec_columns(spec)) == spec  # survives the JSON round trip of the database
    kinds = {spec.kind for _key, spec in DEFAULT_RULES}
    assert kinds == set(RuleKind)


def test_the_default_pack_judges_latency_against_each_pools_slo_and_holds_its_threshold_alerts() -> None:
    pack = dict(DEFAULT_RULES)
    assert (pack["p99_latency_near_slo"].slo_ratio, pack["p99_latency_high"].slo_ratio) == (0.8, 1.0)
    assert all(spec.threshold is None for spec in (pack["p99_latency_near_slo"], pack["p99_latency_high"]))
    thresholds = [spec for spec in pack.values() if spec.kind is RuleKind.THRESHOLD]
    assert thresholds and all(spec.keep_firing_seconds >= 300 for spec in thresholds)
