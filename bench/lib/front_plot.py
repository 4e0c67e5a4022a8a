"""The attainment-versus-cost fronts of ``bench.autoscaling`` as one SVG: a panel per series, a line per policy's
sweep, a ring at each policy's default settings. Plain SVG text, no plotting library: x is replica-hours over the
oracle's, y the SLO attainment (from 0.9, or the panel's lowest point if higher; points below are drawn on the
bottom edge)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

COLOURS: Mapping[str, str] = {"reactive": "#1f77b4", "predictive": "#d62728", "hybrid": "#2ca02c"}
PANEL_W, PANEL_H = 330, 230
LEFT, RIGHT, TOP, BOTTOM = 46, 12, 34, 34
COLUMNS = 3
Y_FLOOR = 0.9

XY = tuple[float, float]


@dataclass(frozen=True)
class Panel:
    fronts: Mapping[str, Sequence[XY]]  # policy → its sweep's points, cheapest first
    defaults: Mapping[str, XY]  # policy → its default settings' point


def fronts_svg(panels: Mapping[str, Panel]) -> str:
    rows = -(-len(panels) // COLUMNS)
    width, height = COLUMNS * PANEL_W, rows * PANEL_H + 28
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="10">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        _legend(),
    ]
    for i, (name, panel) in enumerate(panels.items()):
        parts.append(_panel(name, panel, (i % COLUMNS) * PANEL_W, 28 + (i // COLUMNS) * PANEL_H))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _legend() -> str:
    items = []
    for k, (policy, colour) in enumerate(COLOURS.items()):
        x = 10 + k * 120
        items.append(
            f'<line x1="{x}" y1="14" x2="{x + 24}" y2="14" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{x + 30}" y="18">{policy}</text>'
        )
    items.append('<circle cx="380" cy="14" r="4" fill="none" stroke="black"/><text x="390" y="18">defaults</text>')
    items.append('<text x="470" y="18">x: replica-hours × oracle · y: SLO attainment</text>')
    return "".join(items)


def _panel(name: str, panel: Panel, x0: float, y0: float) -> str:
    points = [p for front in panel.fronts.values() for p in front] + list(panel.defaults.values())
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    y_lo = max(min(p[1] for p in points), Y_FLOOR)
    y_lo = min(y_lo, 0.999)
    x_span, y_span = max(x_hi - x_lo, 1e-9), 1.0 - y_lo
    plot_w, plot_h = PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM

    def at(p: XY) -> tuple[float, float]:
        y = min(max(p[1], y_lo), 1.0)
        return x0 + LEFT + (p[0] - x_lo) / x_span * plot_w, y0 + TOP + (1.0 - y) / y_span * plot_h

    out = [
        f'<text x="{x0 + LEFT}" y="{y0 + 14}" font-weight="bold">{escape(name)}</text>',
        f'<rect x="{x0 + LEFT}" y="{y0 + TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for k in range(3):  # three ticks per axis
        fx, fy = k / 2, k / 2
        tx, ty = x_lo + fx * x_span, y_lo + fy * y_span
        px, py = x0 + LEFT + fx * plot_w, y0 + TOP + (1 - fy) * plot_h
        out.append(f'<text x="{px:.1f}" y="{y0 + TOP + plot_h + 14}" text-anchor="middle">{tx:.2f}</text>')
        out.append(f'<text x="{x0 + LEFT - 4}" y="{py + 3:.1f}" text-anchor="end">{ty:.3f}</text>')
    for policy, front in panel.fronts.items():
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(at, front))
        colour = COLOURS.get(policy, "black")
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8" fill="{colour}"/>' for x, y in map(at, front))
    for policy, point in panel.defaults.items():
        x, y = at(point)
        colour = COLOURS.get(policy, "black")
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    return "\n".join(out)
