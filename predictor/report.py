"""The backtest's outputs (CONTRACT section 7): forecasts.csv, summary.json and a self-contained report.html whose
inline SVGs plot the actuals, the 1-step- and h-step-ahead forecasts and the h-step 90 % band, and the precision–
recall curve of the saturation probability against the naive alarm's single point."""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from predictor.backtest import Backtest
from predictor.base import FloatArray
from predictor.series_csv import value_text

FORECAST_COLUMNS = ("origin", "step", "target", "actual", "yhat", "lo", "hi")
_WIDTH, _HEIGHT, _MARGIN_LEFT, _MARGIN = 1100, 380, 80, 30
_TICKS = 5


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
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.legend span {{ margin-right: 1.5em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
{_scores_table(summary)}
<p class="legend"><span style="color:#333">━ actual</span><span style="color:#1f77b4">━ 1 step ahead</span>
<span style="color:#d62728">━ {summary["horizon_steps"]} steps ahead</span>
<span style="color:#d62728;opacity:0.4">█ 90 % interval ({summary["horizon_steps"]} steps ahead)</span>
<span style="color:#999">┊ first origin</span></p>
{render_svg(result, summary.get("series"))}
<p>MASE is the forecast's mean absolute error over the naive forecast's one-step error: under 1 beats repeating the
last value. The 90 % band should cover about 90 % of the actuals.</p>
<h2>Saturation alarms (threshold: the series' 90th percentile)</h2>
{render_pr_curve(summary["saturation"])}
<details><summary>summary.json</summary>
<pre>{html.escape(json.dumps(summary, indent=2))}</pre>
</details>
</body></html>
"""


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


def human_number(value: float) -> str:
    """3 significant digits with k/M/G for large magnitudes: 477900 → "478k", 2.781153 → "2.78", -0.5 → "-0.5"."""
    magnitude = abs(value)
    for threshold, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def duration_words(seconds: float) -> str:
    """600 → "10 min", 900 → "15 min", 60 → "1 min", 30 → "30 s", 7200 → "2 h", 86400 → "1 d"."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g} {unit}"
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:g} s"


def render_svg(result: Backtest, series: str | None = None) -> str:
    """An inline SVG: x is time (UTC), y the value; NaN breaks every line and the band. A series that never goes
    below 0 keeps its axis at 0 and its band clipped there (a count has no negative values to show)."""
    h, origins = result.plan.horizon_steps, np.asarray(result.plan.origins)
    size = len(result.history)
    fc = result.forecasts
    observed = result.history.values[np.isfinite(result.history.values)]
    floor = 0.0 if observed.size and float(observed.min()) >= 0 else -math.inf
    lo_band, hi_band = np.maximum(fc.lo[:, -1], floor), fc.hi[:, -1]
    span = np.concatenate([result.history.values, lo_band, hi_band, fc.yhat.ravel()])
    finite = span[np.isfinite(span)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    scale = _Scale(size, low, high if high > low else low + 1)
    index = np.arange(size, dtype=float)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img">',
        _axes(scale, result.history.start_ts, result.history.step_seconds, series),
        *_band(scale, origins + h, lo_band, hi_band),
        _polyline(scale, index, result.history.values, "#333", 1.0),
        _polyline(scale, origins + 1.0, fc.yhat[:, 0], "#1f77b4", 1.0),
    ]
    if h > 1:
        parts.append(_polyline(scale, origins + float(h), fc.yhat[:, -1], "#d62728", 1.0))
    x0 = scale.x(float(origins[0]))
    parts.append(
        f'<line x1="{x0:.1f}" y1="{_MARGIN}" x2="{x0:.1f}" y2="{_HEIGHT - _MARGIN}" stroke="#999" '
        'stroke-dasharray="4 3"/>'
    )
    parts.append("</svg>")
    return "\n".join(parts)


class _Scale:
    def __init__(self, size: int, low: float, high: float) -> None:
        self.size, self.low, self.high = size, low, high

    def x(self, index: float) -> float:
        return _MARGIN_LEFT + (_WIDTH - _MARGIN_LEFT - _MARGIN) * index / max(self.size - 1, 1)

    def y(self, value: float) -> float:
        return _HEIGHT - _MARGIN - (_HEIGHT - 2 * _MARGIN) * (value - self.low) / (self.high - self.low)


def _axes(scale: _Scale, start_ts: float, step_s: float, series: str | None) -> str:
    """Both axes with their titles: value ticks in 3 significant digits (478k), time ticks in UTC, with the day on
    the first tick and on every tick of a series longer than a day."""
    bottom, right = _HEIGHT - _MARGIN, _WIDTH - _MARGIN
    mid_y = (_MARGIN + bottom) / 2
    value_title = f"value per step, as in {series}" if series else "value per step"
    lines = [
        f'<line x1="{_MARGIN_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>',
        f'<line x1="{_MARGIN_LEFT}" y1="{_MARGIN}" x2="{_MARGIN_LEFT}" y2="{bottom}" stroke="#888"/>',
        f'<text x="14" y="{mid_y:.1f}" font-size="11" text-anchor="middle" transform="rotate(-90 14 {mid_y:.1f})">'
        f"{html.escape(value_title)}</text>",
        f'<text x="{(_MARGIN_LEFT + right) / 2:.1f}" y="{_HEIGHT - 2}" font-size="11" text-anchor="middle">'
        "time (UTC)</text>",
    ]
    days = scale.size * step_s > 86400
    for tick in range(_TICKS + 1):
        value = scale.low + (scale.high - scale.low) * tick / _TICKS
        y = scale.y(value)
        opening = f'<text x="{_MARGIN_LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
        lines.append(f"{opening}{human_number(value)}</text>")
        index = round((scale.size - 1) * tick / _TICKS)
        x = scale.x(index)
        anchor = "start" if tick == 0 else "end" if tick == _TICKS else "middle"
        when = datetime.fromtimestamp(start_ts + index * step_s, UTC)
        label = when.strftime("%m-%d %H:%M" if days or tick == 0 else "%H:%M")
        lines.append(f'<text x="{x:.1f}" y="{bottom + 16}" font-size="11" text-anchor="{anchor}">{label}</text>')
    return "\n".join(lines)


def _runs(mask: np.ndarray[Any, np.dtype[np.bool_]]) -> list[tuple[int, int]]:
    """Start and end (exclusive) of each run of True: the pieces a line draws between NaN gaps."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _points(scale: _Scale, xs: FloatArray, ys: FloatArray) -> str:
    return " ".join(f"{scale.x(float(x)):.1f},{scale.y(float(y)):.1f}" for x, y in zip(xs, ys, strict=True))


def _polyline(scale: _Scale, xs: FloatArray, ys: FloatArray, colour: str, width: float) -> str:
    return "\n".join(
        f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" points="{_points(scale, xs[a:b], ys[a:b])}"/>'
        for a, b in _runs(np.isfinite(ys))
    )


def _band(scale: _Scale, xs: np.ndarray[Any, Any], lo: FloatArray, hi: FloatArray) -> list[str]:
    xs = xs.astype(float)
    shapes = []
    for a, b in _runs(np.isfinite(lo) & np.isfinite(hi)):
        outline = f"{_points(scale, xs[a:b], hi[a:b])} {_points(scale, xs[a:b][::-1], lo[a:b][::-1])}"
        shapes.append(f'<polygon fill="#d62728" fill-opacity="0.18" stroke="none" points="{outline}"/>')
    return shapes


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
