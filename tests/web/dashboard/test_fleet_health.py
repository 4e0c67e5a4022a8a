"""The fleet health rules (collector.fleet_health): size classes, verdicts, trends and the figures from rollups."""

from __future__ import annotations

from typing import Any, cast

import pytest

from collector.fleet_health import (
    CHECKS,
    FleetFigures,
    SizeClass,
    Trend,
    Verdict,
    coefficient_of_variation,
    evaluate,
    figures_from_window,
    report,
    scale_up_seconds,
    size_class,
)
from collector.series import WindowStats

BY_FIGURE = {c.figure: c for c in CHECKS}


def _figures(**values: float | None) -> FleetFigures:
    return FleetFigures(**cast(dict[str, Any], values))


@pytest.mark.parametrize(
    ("gpus", "size"),
    [
        (0, SizeClass.NO_GPUS),
        (1, SizeClass.SMALL),
        (8, SizeClass.SMALL),
        (9, SizeClass.MEDIUM),
        (64, SizeClass.MEDIUM),
        (65, SizeClass.LARGE),
    ],
)
def test_size_classes(gpus: int, size: SizeClass) -> None:
    assert size_class(gpus) is size


@pytest.mark.parametrize(
    ("figure", "value", "verdict"),
    [
        ("gpu_memory_use_ratio", 0.86, Verdict.PASS),
        ("gpu_memory_use_ratio", 0.60, Verdict.FAIL),
        ("kv_cache_peak_ratio", 0.97, Verdict.FAIL),
        ("kv_fragmentation_ratio", 0.09, Verdict.PASS),
        ("kv_fragmentation_ratio", 0.10, Verdict.FAIL),
        ("gpu_utilization_ratio", 0.75, Verdict.PASS),
        ("latency_p99_over_slo", 1.2, Verdict.FAIL),
        ("load_spread_ratio", 0.033, Verdict.PASS),
        ("scale_up_over_planned", 1.4, Verdict.FAIL),
        ("failover_seconds", 30.0, Verdict.PASS),
        ("forecast_mase", 0.8, Verdict.PASS),
    ],
)
def test_each_check_against_its_target(figure: str, value: float, verdict: Verdict) -> None:
    assert evaluate(BY_FIGURE[figure], _figures(**{figure: value})).verdict is verdict


def test_an_unmeasured_figure_is_not_measured_with_its_reason_never_a_pass() -> None:
    result = evaluate(BY_FIGURE["failover_seconds"], FleetFigures(notes={"failover_seconds": "no source"}))
    assert (result.verdict, result.value, result.note, result.trend) == (
        Verdict.NOT_MEASURED,
        None,
        "no source",
        Trend.UNKNOWN,
    )


@pytest.mark.parametrize(
    ("figure", "now", "before", "trend"),
    [
        ("gpu_utilization_ratio", 0.80, 0.70, Trend.BETTER),  # higher is better
        ("gpu_utilization_ratio", 0.70, 0.80, Trend.WORSE),
        ("latency_p99_over_slo", 0.7, 0.9, Trend.BETTER),  # lower is better
        ("latency_p99_over_slo", 0.9, 0.905, Trend.STEADY),  # under 2 % of the target
        ("gpu_utilization_ratio", 0.80, None, Trend.UNKNOWN),
    ],
)
def test_trends(figure: str, now: float, before: float | None, trend: Trend) -> None:
    result = evaluate(BY_FIGURE[figure], _figures(**{figure: now}), _figures(**{figure: before}))
    assert result.trend is trend and result.previous == before


def test_a_small_fleet_sees_the_small_checks_and_is_told_what_comes_later() -> None:
    found = report(4, FleetFigures())
    assert found.size is SizeClass.SMALL
    assert {r.check.figure for r in found.results} == {
        "gpu_memory_use_ratio",
        "kv_cache_peak_ratio",
        "gpu_utilization_ratio",
        "latency_p99_over_slo",
    }
    assert "failover_seconds" in {c.figure for c in found.later}
    assert {r.check.figure for r in report(200, FleetFigures()).results} == set(BY_FIGURE)
    assert report(0, FleetFigures()).size is SizeClass.NO_GPUS


def test_figures_from_a_window_of_rollups() -> None:
    stats = [
        WindowStats("a", 0, None, {"gpu_memory_used_bytes": 60.0, "gpu_utilization_ratio": 0.52}, {}),
        WindowStats("b", 0, None, {"gpu_memory_used_bytes": 20.0, "gpu_utilization_ratio": 0.48}, {}),
        WindowStats("a", None, "chat", {}, {"kv_cache_utilization_ratio": 0.7, "request_latency_p99_seconds": 0.6}),
        WindowStats("b", None, "chat", {}, {"kv_cache_utilization_ratio": 0.9, "request_latency_p99_seconds": 0.3}),
        WindowStats("b", None, "batch", {}, {"request_latency_p99_seconds": 9.0}),  # no SLO: not judged
    ]
    figures = figures_from_window(stats, {("a", 0): 100, ("b", 0): 100}, {"chat": 0.5})
    assert figures.gpu_memory_use_ratio == pytest.approx(0.4)  # 80 of 200
    assert figures.gpu_utilization_ratio == pytest.approx(0.5)
    assert figures.kv_cache_peak_ratio == 0.9
    assert figures.latency_p99_over_slo == pytest.approx(1.2)
    assert figures.load_spread_ratio == pytest.approx(0.04)  # std 0.02 over mean 0.5


def test_nothing_measured_gives_no_figures() -> None:
    assert figures_from_window([], {}, {}) == FleetFigures()
    assert coefficient_of_variation([0.5]) is None and coefficient_of_variation([0.0, 0.0]) is None


def test_scale_up_time_is_until_the_target_is_ready() -> None:
    history = [(100.0, 2, 0), (105.0, 2, 1), (110.0, 2, 1), (150.0, 3, 0)]
    assert scale_up_seconds(103.0, 3, history) == 47.0
    assert scale_up_seconds(103.0, 4, history) is None  # never got there
