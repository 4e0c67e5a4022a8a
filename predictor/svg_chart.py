"""Time-series charts as inline SVG, and the page they sit on, for the reports the CLI writes (``fleetpilot
backtest``, ``fleetpilot simulate``): lines and bands over UTC time, titled axes, ticks in 3 significant digits
(478k) and clock times, a gap wherever a value is missing. Plain text, no plotting library, no network: a report
opens anywhere."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from predictor.base import FloatArray

WIDTH, HEIGHT, MARGIN_LEFT, MARGIN = 1100, 340, 80, 30
TICKS = 5


@dataclass(frozen=True)
class Line:
    ts: FloatArray  # Unix seconds
    values: FloatArray  # NaN: a gap
    colour: str
    width: float = 1.0
    steps: bool = False  # drawn as a staircase (a count that holds until it changes)


@dataclass(frozen=True)
class Band:
    ts: FloatArray
    lo: FloatArray
    hi: FloatArray
    colour: str


def report_page(title: str, body: str) -> str:
    """A self-contained HTML page: ``title`` as its title and heading, then ``body``."""
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
{body}
</body></html>
"""


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


def time_chart(
    lines: Sequence[Line],
    *,
    y_title: str,
    bands: Sequence[Band] = (),
    marks: Sequence[float] = (),  # times drawn as dashed verticals (the first origin, ...)
    floor_zero: bool = True,  # a y axis from 0 when no value is negative; bands clipped there
) -> str:
    ts = np.concatenate([line.ts for line in lines] + [band.ts for band in bands]) if lines or bands else np.empty(0)
    values = [line.values for line in lines] + [b.lo for b in bands] + [b.hi for b in bands]
    every = np.concatenate(values) if values else np.empty(0)
    finite = every[np.isfinite(every)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if floor_zero and all(float(np.nanmin(line.values, initial=0.0)) >= 0 for line in lines):
        low = 0.0  # demand, replicas, counts: from 0, so a swing is read at its true size
    start, end = (float(ts.min()), float(ts.max())) if ts.size else (0.0, 1.0)
    if high - low <= 1e-9 * max(abs(low), 1.0):  # one value, or none: a range around it, not ticks 1e-9 apart
        high = low + max(abs(low) * 0.1, 1.0)
    ticks = nice_ticks(low, high)
    scale = _Scale(start, end if end > start else start + 1, ticks[0], ticks[-1])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
        _axes(scale, y_title, ticks),
        *(_band(scale, band, low if floor_zero else -math.inf) for band in bands),
        *(_polyline(scale, line) for line in lines),
    ]
    for at in marks:
        x = scale.x(at)
        parts.append(
            f'<line x1="{x:.1f}" y1="{MARGIN}" x2="{x:.1f}" y2="{HEIGHT - MARGIN}" stroke="#999" '
            'stroke-dasharray="4 3"/>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


class _Scale:
    def __init__(self, start: float, end: float, low: float, high: float) -> None:
        self.start, self.end, self.low, self.high = start, end, low, high

    def x(self, ts: float) -> float:
        return MARGIN_LEFT + (WIDTH - MARGIN_LEFT - MARGIN) * (ts - self.start) / (self.end - self.start)

    def y(self, value: float) -> float:
        return HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * (value - self.low) / (self.high - self.low)


def nice_ticks(low: float, high: float, most: int = TICKS + 1) -> list[float]:
    """Round value ticks covering [low, high], at most ``most`` of them, a step of 1, 2 or 5 × 10^k: 0..12,900 →
    0, 5k, 10k, 15k; 0.2..0.9 → 0.2, 0.4, 0.6, 0.8, 1."""
    raw = (high - low) / max(most - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw - 1e-12)
    first = math.floor(low / step + 1e-9) * step
    count = math.ceil((high - first) / step - 1e-9) + 1
    return [round(first + i * step, 12) for i in range(max(count, 2))]


def _axes(scale: _Scale, y_title: str, ticks: Sequence[float]) -> str:
    """Both axes with their titles: value ticks in 3 significant digits, time ticks in UTC, with the day on the
    first tick and on every tick of a chart longer than a day."""
    bottom, right = HEIGHT - MARGIN, WIDTH - MARGIN
    mid_y = (MARGIN + bottom) / 2
    lines = [
        f'<line x1="{MARGIN_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>',
        f'<line x1="{MARGIN_LEFT}" y1="{MARGIN}" x2="{MARGIN_LEFT}" y2="{bottom}" stroke="#888"/>',
        f'<text x="14" y="{mid_y:.1f}" font-size="11" text-anchor="middle" transform="rotate(-90 14 {mid_y:.1f})">'
        f"{html.escape(y_title)}</text>",
        f'<text x="{(MARGIN_LEFT + right) / 2:.1f}" y="{HEIGHT - 2}" font-size="11" text-anchor="middle">'
        "time (UTC)</text>",
    ]
    for value in ticks:
        opening = f'<text x="{MARGIN_LEFT - 6}" y="{scale.y(value) + 4:.1f}" font-size="11" text-anchor="end">'
        lines.append(f"{opening}{human_number(value)}</text>")
    days = scale.end - scale.start > 86400
    for tick in range(TICKS + 1):
        at = scale.start + (scale.end - scale.start) * tick / TICKS
        anchor = "start" if tick == 0 else "end" if tick == TICKS else "middle"
        label = datetime.fromtimestamp(at, UTC).strftime("%m-%d %H:%M" if days or tick == 0 else "%H:%M")
        x = scale.x(at)
        lines.append(f'<text x="{x:.1f}" y="{bottom + 16}" font-size="11" text-anchor="{anchor}">{label}</text>')
    return "\n".join(lines)


def _runs(mask: np.ndarray[Any, np.dtype[np.bool_]]) -> list[tuple[int, int]]:
    """Start and end (exclusive) of each run of True: the pieces a line draws between NaN gaps."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _points(scale: _Scale, xs: FloatArray, ys: FloatArray) -> str:
    return " ".join(f"{scale.x(float(x)):.1f},{scale.y(float(y)):.1f}" for x, y in zip(xs, ys, strict=True))


def _polyline(scale: _Scale, line: Line) -> str:
    pieces = []
    for a, b in _runs(np.isfinite(line.values)):
        xs, ys = line.ts[a:b], line.values[a:b]
        if line.steps and len(xs) > 1:  # hold each value until the next: (x0, y0) (x1, y0) (x1, y1) ...
            xs = np.repeat(xs, 2)[1:]
            ys = np.repeat(ys, 2)[:-1]
        points = _points(scale, xs, ys)
        pieces.append(f'<polyline fill="none" stroke="{line.colour}" stroke-width="{line.width}" points="{points}"/>')
    return "\n".join(pieces)


def _band(scale: _Scale, band: Band, floor: float) -> str:
    lo = np.maximum(band.lo, floor)
    shapes = []
    for a, b in _runs(np.isfinite(lo) & np.isfinite(band.hi)):
        xs = band.ts[a:b]
        outline = f"{_points(scale, xs, band.hi[a:b])} {_points(scale, xs[::-1], lo[a:b][::-1])}"
        shapes.append(f'<polygon fill="{band.colour}" fill-opacity="0.18" stroke="none" points="{outline}"/>')
    return "\n".join(shapes)
