"""bench.autoscaling's readings: the cost of an attainment on a front, a run against the HPA's front where the HPA
never gets there, the share of the achievable gain, the table's spreads and targets, and the plot."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from bench.lib.autoscaling_plot import report_svg
from bench.lib.autoscaling_runs import DEFAULT_STARTUP_S, SeriesRuns, StartupRuns
from bench.lib.autoscaling_summary import row_figures, spread, summarise
from bench.lib.forecast_scores import Alarms, ForecastQuality, alarms
from bench.lib.fronts import Point, attainment_at, gain_share, matched, replica_hours_at


def point(attainment: float, replica_hours: float, knob: float = 0.0) -> Point:
    return Point(knob, attainment, replica_hours)


REACTIVE = [point(0.95, 90.0, 0.9), point(0.97, 100.0, 0.8), point(0.99, 120.0, 0.7), point(0.995, 150.0, 0.6)]


def test_the_cost_of_an_attainment_is_read_between_the_two_points_around_it() -> None:
    assert replica_hours_at(REACTIVE, 0.98) == pytest.approx(110.0)
    assert replica_hours_at(REACTIVE, 0.99) == pytest.approx(120.0)
    assert replica_hours_at(REACTIVE, 0.5) == pytest.approx(90.0)  # the cheapest point already reaches it
    assert replica_hours_at(REACTIVE[:3], 0.995) is None  # beyond the front


def test_the_attainment_at_a_cost_is_read_the_same_way() -> None:
    assert attainment_at(REACTIVE, 110.0) == pytest.approx(0.98)
    assert attainment_at(REACTIVE, 200.0) == 0.995
    assert attainment_at(REACTIVE, 80.0) is None  # every point costs more


def test_a_run_is_compared_at_the_attainment_it_reached() -> None:
    found = matched(point(0.98, 99.0), [], REACTIVE)
    assert found is not None and found.ratio == pytest.approx(0.9) and found.attainment == 0.98


def test_past_the_hpas_best_both_fronts_are_read_where_the_hpas_ends() -> None:
    # the HPA never passes 0.995 (at 150); the run reached 0.999 for 160, and its sweep reached 0.99 for 100:
    # at 0.995 its front reads 130 (between 100 at 0.99 and 160 at 0.999... the line gives 133.3)
    found = matched(point(0.999, 160.0, 0.99), [point(0.99, 100.0, 0.95)], REACTIVE)
    assert found is not None and found.attainment == 0.995
    assert found.replica_hours == pytest.approx(100 + (0.995 - 0.99) / (0.999 - 0.99) * 60)
    assert found.ratio == pytest.approx(found.replica_hours / 150.0)


def test_the_share_of_the_achievable_gain() -> None:
    assert gain_share(140.0, 120.0, 100.0) == pytest.approx(0.5)
    assert gain_share(140.0, 150.0, 100.0) == pytest.approx(-0.25)  # dearer than the HPA: a loss
    assert gain_share(100.0, 90.0, 100.0) is None  # nothing to win


def test_spreads_skip_what_could_not_be_read() -> None:
    assert spread([1.0, None, 3.0, 2.0]) == {"median": 2.0, "p10": 1.2, "p90": 2.8, "n": 3}
    assert spread([None]) == {"median": None, "p10": None, "p90": None, "n": 0}


def test_alarms_count_hits_against_events() -> None:
    assert alarms([True, True, False, False], [True, False, True, False]) == Alarms(0.5, 0.5, 0.5)
    assert alarms([False, False], [True, False]) == Alarms(None, 0.0, None)


def runs(name: str, predictive: Point) -> SeriesRuns:
    at = StartupRuns(REACTIVE, point(1.0, 80.0), point(1.0, 84.0))
    at.predictive["auto"] = {0.95: point(0.97, 90.0, 0.95), 0.99: predictive}
    at.hybrid = {0.99: point(0.99, 125.0, 0.99)}
    scores = ForecastQuality(0.99, 0.8, 10, Alarms(0.7, 0.8, 0.75), Alarms(0.6, 0.6, 0.6))
    return SeriesRuns(name, 60.0, 100, 10, 1.0, {DEFAULT_STARTUP_S: at}, None, {"auto": scores}, {"auto": 1.0}, 0.3)


def test_the_table_and_the_targets_from_every_series() -> None:
    series = [runs("a", point(0.99, 96.0, 0.99)), runs("b", point(0.992, 102.0, 0.99))]
    figures = summarise(series, source="test", seconds=1.0)
    head = figures["rows"]["predictive×auto"]
    assert head["series"] == 2 and head["reached_target"] == 1.0
    # a: 96 / 120 at 0.99; b: 102 against 120 + 0.4 × 30 = 132 at 0.992
    assert head["ratio"]["median"] == pytest.approx((96 / 120 + 102 / 132) / 2, abs=1e-4)
    # gain: (120 − 96) / (120 − 84) = 0.667 on a
    assert row_figures(series[0].by_startup[DEFAULT_STARTUP_S], point(0.99, 96.0), [], None).gain == pytest.approx(
        24 / 36
    )
    assert figures["better_per_series"] == {"a": "predictive", "b": "predictive"}
    assert figures["targets_met"]["median_ratio_0_85"] is True and figures["targets_met"]["mase_0_9"] is True
    assert figures["targets_met"]["startup_sweep"] is None  # no sweep was run


def test_the_plot_is_one_svg_with_a_curve_per_row() -> None:
    svg = report_svg([runs("a", point(0.99, 96.0, 0.99)), runs("b", point(0.99, 110.0, 0.99))])
    root = ElementTree.fromstring(svg)
    lines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2  # predictive×auto and hybrid×auto
