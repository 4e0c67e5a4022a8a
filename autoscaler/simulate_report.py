"""``fleetpilot simulate``'s report.html: for each policy run, the demand against the capacity its ready replicas
gave (ready × capacity per replica) and the capacity it had asked for (desired × capacity), over time, under a table
of what each run cost and attained. Self-contained (inline SVG, no script, no network)."""

from __future__ import annotations

import html
from collections.abc import Mapping

import numpy as np

from autoscaler.simulate import SimulationResult, summary
from predictor.svg_chart import Line, duration_words, human_number, report_page, time_chart

DEMAND, READY, DESIRED = "#333", "#2ca02c", "#ff7f0e"


def render_report(
    results: Mapping[str, SimulationResult], capacity_per_replica: float, series: str, startup_seconds: float
) -> str:
    """The page for ``results`` (policy → its run, in the order to show them)."""
    step = next(iter(results.values())).step_seconds if results else 60.0
    title = (
        f"Autoscaling simulation of {series}: {len(results)} polic{'ies' if len(results) > 1 else 'y'}, one step "
        f"{duration_words(step)}, a replica serves {human_number(capacity_per_replica)} per step and starts in "
        f"{duration_words(startup_seconds)}"
    )
    sections = [_section(name, result, capacity_per_replica) for name, result in results.items()]
    body = f"""{_table(results, capacity_per_replica)}
<p>Attainment: the share of steps whose demand the ready replicas could carry. Replica-hours: every step's larger of
desired and ready replicas, times the step.</p>
<p class="legend"><span style="color:{DEMAND}">━ demand</span><span style="color:{READY}">━ ready replicas ×
capacity</span><span style="color:{DESIRED}">━ desired replicas × capacity</span></p>
{"".join(sections)}
"""
    return report_page(title, body)


def _table(results: Mapping[str, SimulationResult], capacity: float) -> str:
    rows = []
    for name, result in results.items():
        s = summary(result, capacity)
        attained = s["slo_attainment"]
        share = "–" if not isinstance(attained, float) else f"{100 * attained:.2f} %"
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{result.replica_hours:,.1f}</td><td>{share}</td>"
            f"<td>{result.scale_events:,}</td></tr>"
        )
    head = "<tr><th>policy</th><th>replica-hours</th><th>attainment</th><th>scale events</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _section(name: str, result: SimulationResult, capacity: float) -> str:
    ts = np.array([s.ts for s in result.steps], dtype=float)
    demand = np.array([s.demand for s in result.steps], dtype=float)
    ready = np.array([s.ready for s in result.steps], dtype=float) * capacity
    desired = np.array([s.desired for s in result.steps], dtype=float) * capacity
    chart = time_chart(
        [Line(ts, desired, DESIRED, steps=True), Line(ts, ready, READY, 1.5, steps=True), Line(ts, demand, DEMAND)],
        y_title="demand per step",
    )
    return f"<h2>{html.escape(name)}</h2>\n{chart}\n"
