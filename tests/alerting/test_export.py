"""``fleetpilot alerts export-rules``: the threshold rules as a Prometheus rule file that promtool accepts."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from alerting.export import duration, export_rules, expression
from alerting.rules import Rule, RuleSpec
from fleetpilot.cli import main
from tests.support.prometheus import require_program


def rule(rule_id: int = 1, name: str = "R", **fields: Any) -> Rule:
    return Rule(rule_id, RuleSpec(name=name, **fields), 1, 0.0, 0.0)


THRESHOLD = {"kind": "threshold", "op": ">", "threshold": 0.5}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"metric": "gpu_temperature_celsius", "threshold": 85}, "fleetpilot_gpu_temperature_celsius > 85"),
        (
            {"metric": "request_latency_p99_seconds", "pool": "chat"},
            'fleetpilot_request_latency_p99_seconds{pool="chat"} > 0.5',
        ),
        (
            {"metric": "request_rate_per_second", "group_by": "pool", "aggregate": "sum"},
            "sum by (pool) (fleetpilot_request_rate_per_second) > 0.5",
        ),
        (
            {"metric": "kv_cache_utilization_ratio", "group_by": "pool", "aggregate": "spread"},
            "(max by (pool) (fleetpilot_kv_cache_utilization_ratio) - min by (pool) "
            "(fleetpilot_kv_cache_utilization_ratio)) > 0.5",
        ),
        (
            {"metric": "gpu_power_watts", "group_by": "fleet", "aggregate": "avg"},
            "avg (fleetpilot_gpu_power_watts) > 0.5",
        ),
        (
            {"metric": "network_latency_seconds", "stat": "p99", "window_seconds": 300},
            "quantile_over_time(0.99, fleetpilot_network_latency_seconds[300s]) > 0.5",
        ),
    ],
)
def test_threshold_rules_become_promql(fields: dict[str, Any], expected: str) -> None:
    assert expression(rule(**{**THRESHOLD, **fields})) == expected


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({**THRESHOLD, "metric": "host_disk_io_latency_ms"}, "not in /metrics"),
        ({**THRESHOLD, "metric": "gpu_utilization_ratio", "group_by": "pool", "aggregate": "max"}, "no pool label"),
        ({**THRESHOLD, "metric": "gpu_utilization_ratio", "pool": "chat"}, "no pool label"),
        ({"kind": "absent", "silent_seconds": 30}, "only threshold"),
    ],
)
def test_what_prometheus_cannot_compute_is_named_and_left_out(fields: dict[str, Any], why: str) -> None:
    exported = export_rules([rule(name="Skipped", **fields)])
    assert exported.exported == 0 and why in exported.skipped[0][1]
    assert f"# not exported: Skipped: {exported.skipped[0][1]}" in exported.text


def promtool_check_rules(promtool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_durations() -> None:
    assert (duration(60), duration(1.5), duration(0)) == ("60s", "1500ms", "0s")


@pytest.mark.prometheus
def test_the_exported_default_pack_passes_promtool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    promtool = require_program("promtool")
    out = tmp_path / "rules.yml"
    database = f"sqlite:///{tmp_path}/fleetpilot.db"
    assert main(["alerts", "export-rules", "--database-url", database, "--out", str(out)]) == 0
    assert "wrote 3 rules" in capsys.readouterr().out  # the latency rules' thresholds are each pool's SLO
    checked = promtool_check_rules(promtool, out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rules found" in checked.stdout
    text = out.read_text()
    assert 'alert: "GpuTemperatureHigh"' in text and 'keep_firing_for: "300s"' in text
    assert "# not exported: P99LatencyAboveSlo: its threshold is each pool's SLO" in text


@pytest.mark.prometheus
def test_every_exportable_shape_passes_promtool(tmp_path: Path) -> None:
    promtool = require_program("promtool")
    rules = [
        rule(1, "Hot!", **{**THRESHOLD, "metric": "gpu_temperature_celsius", "for_seconds": 1.5}),
        rule(2, "Spread", **{**THRESHOLD, "metric": "queue_depth_requests", "group_by": "pool", "aggregate": "spread"}),
        rule(3, "Fleet", **{**THRESHOLD, "metric": "gpu_power_watts", "group_by": "fleet", "aggregate": "sum"}),
        rule(4, "P99", **{**THRESHOLD, "metric": "network_latency_seconds", "stat": "p99", "window_seconds": 300}),
        rule(5, "Mean", **{**THRESHOLD, "metric": "gpu_utilization_ratio", "stat": "mean", "window_seconds": 90}),
        rule(
            6,
            "Lbl",
            labels={"team": 'in"fra'},
            annotations={"action": "ça: «go»"},
            **{**THRESHOLD, "metric": "gpu_power_watts"},
        ),
    ]
    out = tmp_path / "rules.yml"
    out.write_text(export_rules(rules).text)
    checked = promtool_check_rules(promtool, out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout
