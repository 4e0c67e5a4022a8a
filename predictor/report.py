"""The backtest's outputs (CONTRACT section 7): forecasts.csv, summary.json and a self-contained report.html whose
inline SVGs plot the actuals, the 1-step- and h-step-ahead forecasts and the h-step 90 % band, and the precision–
recall curve of the saturation probability against the naive alarm's single point."""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from predictor.backtest import Backtest
from predictor.series_csv import value_text
from predictor.svg_chart import Band, Line, duration_words, human_number, report_page, time_chart

FORECAST_COLUMNS = ("origin", "step", "target", "actual", "yhat", "lo", "hi")
_MARGIN = 30  # the precision–recall chart's


def write_outputs(result: Backtest, labels: Sequence[str], out_dir: Path, extras: dict[str, Any]) -> dict[str, Any]:
    """Write the three files into ``out_dir`` (created if needed); returns the summary written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {**result.summary(), **extras}
    write_forecasts_csv(result, labels, out_dir / "forecasts.csv")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.html").write_text(render_html(result, summary), encoding="utf-8")
    return summary


def write_forecasts_csv(result: Backtest, labels: Sequence[str], path: Path) -> None:
    """One row per origin and step: the origin's and the target step's timestamps as the input wrote them (the
    target is ``step`` steps after the origin), the value observed at the target exactly as read, and the forecast;
    an empty field where a value is missing."""
    fc = result.forecasts
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(FORECAST_COLUMNS)
        for row, origin in enumerate(result.plan.origins):
            for k in range(result.plan.horizon_steps):
                forecast = (_number(x) for x in (fc.yhat[row, k], fc.lo[row, k], fc.hi[row, k]))
                target = labels[origin + k + 1]
                writer.writerow([labels[origin], k + 1, target, value_text(result.actual[row, k]), *forecast])


def _number(value: float) -> str:
    return f"{value:.12g}" if math.isfinite(value) else ""


def render_html(result: Backtest, summary: dict[str, Any]) -> str:
    step = result.history.step_seconds
    source = f" on {summary['series']}" if summary.get("series") else ""
    title = (
        f"Backtest of {summary['model']}{source}: {duration_words(summary['horizon_steps'] * step)} ahead "
        f"({summary['horizon_steps']} step{'s' if summary['horizon_steps'] > 1 else ''} of {duration_words(step)}), "
        f"{summary['origins']:,} origins"
    )
    body = f"""{_scores_table(summary)}
<p class="legend"><span style="color:#333">━ actual</span><span style="color:#1f77b4">━ 1 step ahead</span>
<span style="color:#d62728">━ {summary["horizon_steps"]} steps ahead</span>
<span style="color:#d62728;opacity:0.4">█ 90 % interval ({summary["horizon_steps"]} steps ahead)</span>
<span style="color:#999">┊ first origin</span></p>
{render_svg(result)}
<p>MASE is the forecast's mean absolute error over the naive forecast's one-step error: under 1 beats repeating the
last value. The 90 % band should cover about 90 % of the actuals.</p>
<h2>Saturation alarms (threshold: the series' 90th percentile)</h2>
{render_pr_curve(summary["saturation"])}
<details><summary>summary.json</summary>
<pre>{html.escape(json.dumps(summary, indent=2))}</pre>
</details>
"""
    return report_page(title, body)


def _scores_table(summary: dict[str, Any]) -> str:
    rows = [(summary["model"], summary["mase"], summary["smape"], summary["coverage90"], summary["winkler90"])]
    bands = summary.get("baseline_intervals", {})
    rows += [
        (
            f"{name} (baseline)",
            s["mase"],
            s["smape"],
            *(bands.get(name, {}).get(k) for k in ("coverage90", "winkler90")),
        )
        for name, s in summary["baselines"].items()
    ]
    body = "".join(
        "<tr><td>"
        + html.escape(str(name))
        + "</td>"
        + "".join(f"<td>{_cell(v, kind)}</td>" for v, kind in zip(values, COLUMN_KINDS, strict=True))
        + "</tr>"
        for name, *values in rows
    )
    head = "<th>forecast</th><th>MASE</th><th>sMAPE</th><th>90 % coverage</th><th>Winkler score</th>"
    return f"<table><tr>{head}</tr>{body}</table>"


COLUMN_KINDS = ("number", "percent", "share", "number")  # MASE, sMAPE (in %), coverage (a share), Winkler


def _cell(value: float | None, kind: str = "number") -> str:
    """A score as people read it: MASE 0.767, sMAPE 12.3 %, coverage 89.2 %, Winkler 4.78k; – when absent."""
    if value is None:
        return "–"
    if kind == "percent":
        return f"{value:.1f} %"
    if kind == "share":
        return f"{100 * value:.1f} %"
    return human_number(value)


def render_svg(result: Backtest) -> str:
    """The actuals, the 1-step and h-step forecasts at their targets' times and the h-step band, over UTC time;
    NaN breaks every line and the band; a series that never goes below 0 is drawn from 0."""
    h, origins = result.plan.horizon_steps, np.asarray(result.plan.origins)
    history, fc = result.history, result.forecasts
    step = history.step_seconds
    ts = history.start_ts + step * np.arange(len(history), dtype=float)
    at = history.start_ts + step * origins.astype(float)
    lines = [Line(ts, history.values, "#333"), Line(at + step, fc.yhat[:, 0], "#1f77b4")]
    if h > 1:
        lines.append(Line(at + h * step, fc.yhat[:, -1], "#d62728"))
    return time_chart(
        lines,
        y_title="value per step",
        bands=[Band(at + h * step, fc.lo[:, -1], fc.hi[:, -1], "#d62728")],
        marks=[float(at[0])],
    )


def render_pr_curve(saturation: dict[str, Any], size: int = 320) -> str:
    """Recall (x) against precision (y) of ``probability >= cut-off``, one dot per cut-off, and the naive alarm as
    a square: a curve above and to the right of the square beats the naive alarm."""
    span = size - 2 * _MARGIN

    def xy(score: dict[str, Any]) -> tuple[float, float]:
        return _MARGIN + span * score["recall"], size - _MARGIN - span * score["precision"]

    curve = [c for c in saturation["model"]["pr_curve"] if c["precision"] is not None and c["recall"] is not None]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(xy, curve))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" role="img">',
        f'<rect x="{_MARGIN}" y="{_MARGIN}" width="{span}" height="{span}" fill="none" stroke="#888"/>',
        f'<text x="{size / 2}" y="{size - 6}" font-size="11" text-anchor="middle">recall</text>',
        f'<text x="10" y="{size / 2}" font-size="11" transform="rotate(-90 10 {size / 2})">precision</text>',
        f'<polyline fill="none" stroke="#d62728" points="{line}"/>',
    ]
    for c in curve:
        x, y = xy(c)
        title = f"<title>cut-off {c['cutoff']}</title>"
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#d62728">{title}</circle>')
    naive = saturation["naive"]
    if naive["precision"] is not None and naive["recall"] is not None:
        x, y = xy(naive)
        square = f'x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8"'
        parts.append(f'<rect {square} fill="#333"><title>naive</title></rect>')
    parts.append("</svg>")
    caption = (
        f"<p>{saturation['events']} events over {saturation['origins']} origins; average precision "
        f"{_cell(saturation['model']['average_precision'])}; model F1 {_cell(saturation['model']['f1'])} against "
        f"naive F1 {_cell(naive['f1'])} (■).</p>"
    )
    return caption + "\n".join(parts)
