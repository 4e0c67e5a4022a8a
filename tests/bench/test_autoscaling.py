"""bench.autoscaling's readings of the fronts: the cost at an attainment, the attainment at a cost, which forecast
policy is the better at its defaults, and the SVG the fronts are drawn into."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from bench.autoscaling import Point, SeriesFigures, attainment_at, plotted, replica_hours_at
from bench.lib.front_plot import fronts_svg


def point(attainment: float, replica_hours: float, knob: float = 0.0) -> Point:
    return Point(knob, attainment, replica_hours, 0, 0)


REACTIVE = [point(0.95, 90.0, 0.9), point(0.97, 100.0, 0.8), point(0.99, 120.0, 0.7), point(1.0, 150.0, 0.6)]


def test_the_cost_of_an_attainment_is_read_between_the_two_points_around_it() -> None:
    assert replica_hours_at(REACTIVE, 0.98) == pytest.approx(110.0)
    assert replica_hours_at(REACTIVE, 0.99) == pytest.approx(120.0)
    assert replica_hours_at(REACTIVE, 0.5) == pytest.approx(90.0)  # the cheapest point already reaches it
    assert replica_hours_at(REACTIVE[:3], 0.995) is None  # beyond the front


def test_the_attainment_at_a_cost_is_read_the_same_way() -> None:
    assert attainment_at(REACTIVE, 110.0) == pytest.approx(0.98)
    assert attainment_at(REACTIVE, 200.0) == 1.0
    assert attainment_at(REACTIVE, 80.0) is None  # every point costs more


def figures(predictive: Point, hybrid: Point) -> SeriesFigures:
    baseline = REACTIVE[2]  # reactive-70: 0.99 at 120
    defaults = {"reactive": baseline, "predictive": predictive, "hybrid": hybrid, "oracle": point(1.0, 80.0)}
    curves = {"reactive": REACTIVE, "predictive": [predictive], "hybrid": [hybrid]}
    return SeriesFigures(1.0, 60.0, 60.0, 100, 0, 0.0, defaults, curves, baseline)


def test_the_better_policy_reaches_reactive70s_attainment_and_costs_least_against_reactives_front() -> None:
    f = figures(predictive=point(0.995, 100.0), hybrid=point(1.0, 140.0))
    assert f.ratio_to_reactive_front("predictive") == pytest.approx(100.0 / 135.0, abs=1e-4)  # front: 135 at 0.995
    assert f.ratio_to_reactive_front("hybrid") == pytest.approx(140.0 / 150.0, abs=1e-4)
    assert f.better() == "predictive"
    short = figures(predictive=point(0.98, 80.0), hybrid=point(0.985, 90.0))  # neither reaches 0.99
    assert short.better() is None


def test_the_fronts_are_drawn_one_line_per_policy_and_a_ring_per_default() -> None:
    svg = fronts_svg(
        {
            "a": plotted(figures(point(0.995, 100.0), point(1.0, 140.0))),
            "b <&>": plotted(figures(point(0.995, 100.0), point(1.0, 140.0))),
        }
    )
    root = ElementTree.fromstring(svg)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    assert len(root.findall("svg:polyline", ns)) == 2 * 3
    rings = [c for c in root.findall("svg:circle", ns) if c.get("r") == "5"]
    assert len(rings) == 2 * 3
    titles = [t.text for t in root.findall("svg:text", ns)]
    assert "a" in titles and "b <&>" in titles  # escaped in the file, read back whole
