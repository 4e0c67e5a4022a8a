"""Pure presentation: numbers with units, tile colours, sparklines, labels for every catalog metric."""

from __future__ import annotations

import pytest

from collector.registry import Gpu, LatestSeries, NodeStatus, NodeView
from web.dashboard.tiles import SHORT_NAMES, Heat, node_heat, sparkline_points
from web.dashboard.units import ABSENT, age, metric_value, number, reporters
from wire.catalog import METRIC_NAMES


@pytest.mark.parametrize(
    ("metric", "value", "shown"),
    [
        ("gpu_utilization_ratio", 0.834, "83 %"),
        ("gpu_memory_used_bytes", 61_203_283_968, "57.0 GiB"),
        ("gpu_memory_used_bytes", 512, "512 B"),
        ("gpu_power_watts", 312.4, "312 W"),
        ("gpu_temperature_celsius", 71.2, "71 °C"),
        ("network_throughput_bytes_per_second", 12_300_000, "12.3 MB/s"),
        ("network_latency_seconds", 0.01234, "12.3 ms"),
        ("request_latency_p99_seconds", 42.0, "42.0 s"),
        ("request_rate_per_second", 41.53, "41.5 /s"),
        ("queue_depth_requests", 3, "3.00 req"),
        ("token_throughput_per_second", 12345.6, "12,346 /s"),
        ("kv_cache_utilization_ratio", None, ABSENT),
        ("kv_cache_utilization_ratio", float("nan"), ABSENT),
    ],
)
def test_values_are_shown_in_their_unit(metric: str, value: float | None, shown: str) -> None:
    assert metric_value(metric, value) == shown


def test_every_catalog_metric_has_a_short_name() -> None:
    assert set(SHORT_NAMES) == set(METRIC_NAMES)


def test_numbers_and_ages() -> None:
    assert number(0) == "0" and number(0.5) == "0.500" and number(1234.5) == "1,234"
    assert age(0.2) == "now" and age(75) == "75.0 s ago" and age(None) == ABSENT


def _node(status: NodeStatus, **metrics: float) -> NodeView:
    gpu = {k: v for k, v in metrics.items() if k.startswith("gpu_")}
    pool = {k: v for k, v in metrics.items() if not k.startswith("gpu_")}
    series = [LatestSeries("n", 0, None, 1.0, gpu, None), LatestSeries("n", None, "chat", 1.0, pool, None)]
    return NodeView("n", status, None, None, 0.0, 1.0, 1.0, [Gpu(0, "H100", None, 80 << 30, None)], series)


@pytest.mark.parametrize(
    ("metrics", "heat", "worst"),
    [
        ({"gpu_utilization_ratio": 0.5, "kv_cache_utilization_ratio": 0.2}, Heat.OK, None),
        ({"gpu_temperature_celsius": 82.0}, Heat.WARN, "gpu_temperature_celsius"),
        ({"gpu_memory_used_bytes": 79 << 30, "gpu_temperature_celsius": 82.0}, Heat.CRITICAL, "gpu_memory_used_bytes"),
        ({"request_latency_p99_seconds": 0.45}, Heat.WARN, "request_latency_p99_seconds"),  # 90 % of a 0.5 s SLO
        ({"request_latency_p99_seconds": 0.6}, Heat.CRITICAL, "request_latency_p99_seconds"),
        ({"queue_depth_requests": 40.0}, Heat.CRITICAL, "queue_depth_requests"),
    ],
)
def test_a_tile_takes_the_colour_of_its_worst_metric(metrics: dict[str, float], heat: Heat, worst: str | None) -> None:
    found = node_heat(_node(NodeStatus.UP, **metrics), {"chat": 0.5})
    assert (found.heat, found.worst_metric) == (heat, worst)


def test_a_down_node_is_not_judged_on_its_last_values() -> None:
    assert node_heat(_node(NodeStatus.DOWN, gpu_temperature_celsius=95.0), {}).heat is Heat.UNKNOWN


def test_sparkline_points_span_the_box() -> None:
    assert sparkline_points([]) == ""
    assert sparkline_points([1.0, 3.0, 2.0], width=60, height=16) == "0.0,16.0 30.0,0.0 60.0,8.0"
    assert sparkline_points([5.0, 5.0], width=60, height=16) == "0.0,8.0 60.0,8.0"  # flat: mid-height


@pytest.mark.parametrize(
    ("sources", "said"),
    [
        (["agent", "agent"], "agents"),
        (["remote_write"], "Prometheus remote write"),  # a Prometheus-only fleet said "Reported by agents"
        (["otlp", "agent"], "agents and OTLP"),
        (["remote_write", "otlp", "agent"], "agents, Prometheus remote write and OTLP"),
        ([], "no node"),
    ],
)
def test_who_reports_is_named_by_the_nodes_sources(sources: list[str], said: str) -> None:
    assert reporters(sources) == said
