"""``bench.autoscaling``'s plot: per forecaster, the distribution over series of its replica-hours against the HPA's
front at the same attainment (an empirical CDF: the share of series at or below each ratio), and the startup sweep.
Plain SVG text, no plotting library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from bench.lib.autoscaling_runs import DEFAULT_STARTUP_S, SeriesRuns
from bench.lib.autoscaling_summary import row_figures, rows_of

COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
WIDTH, HEIGHT = 560, 360
LEFT, RIGHT, TOP, BOTTOM = 50, 150, 30, 40
X_MAX = 2.0


def report_svg(runs: Sequence[SeriesRuns]) -> str:
    curves: dict[str, list[float]] = {}
    for series in runs:
        at = series.by_startup[DEFAULT_STARTUP_S]
        for (policy, name), (run, front) in rows_of(at).items():
            ratio = row_figures(at, run, front, series.rate_oracle).ratio
            if ratio is not None:
                curves.setdefault(f"{policy}×{name}", []).append(ratio)
    return _ecdf_svg(curves, "replica-hours × the HPA's front at the same attainment (ECDF over series)")


def _ecdf_svg(curves: Mapping[str, list[float]], title: str) -> str:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return LEFT + min(x, X_MAX) / X_MAX * plot_w, TOP + (1 - y) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
        'font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="18">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for tick in (0.5, 0.85, 1.0, 1.5, 2.0):
        x, _ = at(tick, 0)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">{tick:g}</text>')
    for tick in (0.0, 0.5, 1.0):
        _, y = at(0, tick)
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for i, (name, values) in enumerate(sorted(curves.items())):
        colour = COLOURS[i % len(COLOURS)]
        ordered = sorted(values)
        points = [at(v, (k + 1) / len(ordered)) for k, v in enumerate(ordered)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        parts.append(
            f'<text x="{WIDTH - RIGHT + 8}" y="{TOP + 14 * (i + 1)}" fill="{colour}">{escape(name)} '
            f"(n {len(ordered)})</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
