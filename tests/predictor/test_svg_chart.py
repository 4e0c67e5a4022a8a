"""The reports' time-series charts: round ticks, gaps, staircases, an axis from 0 for counts."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import numpy as np

from predictor.svg_chart import Band, Line, nice_ticks, time_chart

NS = {"svg": "http://www.w3.org/2000/svg"}
T0 = 1_700_000_000.0


def test_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0, 12_900) == [0.0, 5000.0, 10000.0, 15000.0]
    assert nice_ticks(0.2, 0.9) == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(-470_000, 460_000) == [-600000.0, -400000.0, -200000.0, 0.0, 200000.0, 400000.0, 600000.0]


def test_a_gap_breaks_the_line_and_a_count_is_drawn_from_zero_with_its_band_clipped() -> None:
    ts = T0 + 60 * np.arange(6, dtype=float)
    values = np.array([100.0, 120.0, np.nan, 110.0, 130.0, 125.0])
    svg = time_chart(
        [Line(ts, values, "#333")],
        y_title="requests per step",
        bands=[Band(ts, values - 150, values + 10, "#d62728")],
    )
    root = ElementTree.fromstring(svg)
    assert len(root.findall("svg:polyline", NS)) == 2  # one piece each side of the missing value
    texts = [t.text for t in root.findall("svg:text", NS)]
    assert "0" in texts and "requests per step" in texts and "time (UTC)" in texts
    assert not any(t and re.fullmatch(r"-\d.*", t) for t in texts)  # the band's negative lo is not an axis value
    assert "11-14 22:13" in texts  # the first time tick carries the day


def test_a_staircase_holds_each_value_until_the_next_and_one_point_gets_a_range() -> None:
    ts = T0 + 60 * np.arange(3, dtype=float)
    svg = time_chart([Line(ts, np.array([2.0, 4.0, 4.0]), "#2ca02c", steps=True)], y_title="replicas")
    (line,) = ElementTree.fromstring(svg).findall("svg:polyline", NS)
    assert len(line.get("points", "").split()) == 5  # (t0,2) (t1,2) (t1,4) (t2,4) (t2,4)
    single = ElementTree.fromstring(time_chart([Line(ts[:1], np.array([3.5]), "#333")], y_title="replicas"))
    ticks = [t.text for t in single.findall("svg:text", NS) if t.get("text-anchor") == "end" and t.get("x") == "74"]
    assert len(ticks) == len(set(ticks)) >= 2  # distinct values, not 3.5 six times
