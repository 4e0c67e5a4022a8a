"""What the dashboard's time-series charts draw (``static/charts.js``, with uPlot): the page's one time range and
each chart's data as compact columns.

A page shows one range for all its charts. The last 15 minutes are the raw samples at the agent's 500 ms, and they
stream: the page appends what its server-sent events bring. Longer ranges are 1-minute rollups. A chart's times go
out once, as whole milliseconds after the range's start, shared by its lines (uPlot's aligned columns, ``None``
where a line has no point), and values to 4 significant digits: a node's 15 minutes of samples is about a tenth of
the same points as ``[[ts, value], ...]`` pairs of full floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Query

from collector.series import Point
from wire.catalog import BY_NAME

RAW_SECONDS = 900.0  # the ranges drawn from raw samples, and streamed


@dataclass(frozen=True)
class TimeRange:
    key: str  # the ``?range=`` value
    label: str  # as people say it: "15 min", "6 h"
    seconds: float
    step: float  # the bucket of a series summed over replicas (a pool's demand): 1 s live, about 300 points else

    @property
    def live(self) -> bool:
        """Raw samples, appended as they arrive; else 1-minute rollups, as of the page's load."""
        return self.seconds <= RAW_SECONDS


RANGES: dict[str, TimeRange] = {
    r.key: r
    for r in (
        TimeRange("15m", "15 min", RAW_SECONDS, 1.0),
        TimeRange("1h", "1 h", 3600.0, 60.0),
        TimeRange("6h", "6 h", 6 * 3600.0, 120.0),
        TimeRange("24h", "24 h", 24 * 3600.0, 300.0),
    )
}
DEFAULT_RANGE = "15m"
# A page's ``?range=`` parameter (its Python name is ``range_``: ``range`` is a builtin)
RangeKey = Annotated[
    str, Query(alias="range", pattern="^(" + "|".join(RANGES) + ")$", description="15m, 1h, 6h or 24h")
]

# A chart's title: what the line is, in words (the cards' short names are for a tile's narrow cell).
CHART_TITLES: dict[str, str] = {
    "gpu_utilization_ratio": "GPU utilization",
    "gpu_memory_used_bytes": "GPU memory used",
    "gpu_memory_bandwidth_utilization_ratio": "GPU memory bandwidth utilization",
    "gpu_power_watts": "GPU power draw",
    "gpu_temperature_celsius": "GPU temperature",
    "network_throughput_bytes_per_second": "Network throughput",
    "network_latency_seconds": "Push round-trip time",
    "request_rate_per_second": "Requests/s",
    "queue_depth_requests": "Queued requests",
    "token_throughput_per_second": "Tokens/s",
    "request_latency_p99_seconds": "p99 request latency",
    "kv_cache_utilization_ratio": "KV cache used",
}


def significant(value: float) -> float:
    """4 significant digits: 0.123456 → 0.1235, 61203283968.0 → 6.12e10 (what a chart can show, and no more)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, 3 - math.floor(math.log10(abs(value))))


@dataclass(frozen=True)
class Line:
    """One line of a chart: ``key`` names it for the live updates (``gpu-0``), ``name`` in the legend, ``style``
    how it is drawn (``line``, ``step``, ``dash``, ``points``; ``band`` lines fill between the two of a band)."""

    key: str
    name: str
    points: Sequence[Point]
    style: str = "line"


def table(lines: Sequence[Line], origin: float, *, merge: bool = True) -> dict[str, Any]:
    """uPlot's aligned columns for ``lines``: ``x``, the union of their times in whole ms after ``origin``, and
    ``y``, one column per line (named in ``keys``) with ``None`` where it has no point at that time. A live update
    appends to a ``merge`` table (a history) and replaces any other whole (a forecast)."""
    own = [[ts for ts, _ in line.points] for line in lines]
    if own and all(o == own[0] for o in own):  # the usual case (a node's GPUs are sampled together): no gaps
        times = own[0]
        ys: list[list[float | None]] = [[significant(v) for _, v in line.points] for line in lines]
    else:
        times = sorted({ts for o in own for ts in o})
        at = {ts: i for i, ts in enumerate(times)}
        ys = []
        for line in lines:
            column: list[float | None] = [None] * len(times)
            for ts, value in line.points:
                column[at[ts]] = significant(value)
            ys.append(column)
    return {
        "origin": origin,
        "merge": merge,
        "keys": [line.key for line in lines],
        "x": [round((ts - origin) * 1000.0) for ts in times],
        "y": ys,
    }


def chart(
    chart_id: str, title: str, unit: str, tables: Sequence[dict[str, Any]], lines: Sequence[Line]
) -> dict[str, Any]:
    """A chart of one or more tables (lines sampled at different times: a pool's demand and its forecast), with
    its title and unit (the page formats the axis and the legend by it) and how each of its ``lines`` is drawn."""
    return {
        "id": chart_id,
        "title": title,
        "unit": unit,
        "lines": {line.key: {"name": line.name, "style": line.style} for line in lines},
        "tables": list(tables),
    }


def metric_chart(metric: str, lines: Sequence[Line], origin: float) -> dict[str, Any]:
    """The chart of a catalog metric, one table of its lines."""
    return chart(metric, CHART_TITLES[metric], BY_NAME[metric].unit, [table(lines, origin)], lines)


def metric_meta() -> dict[str, dict[str, str]]:
    """Every catalog metric's chart title and unit: a live page draws a chart for a metric that appears later."""
    return {name: {"title": title, "unit": BY_NAME[name].unit} for name, title in CHART_TITLES.items()}


def window(time_range: TimeRange, now: float, *, ahead: float = 0.0) -> dict[str, Any]:
    """The x-range every chart of the page shares: the range up to now, and ``ahead`` seconds of forecast."""
    return {
        "key": time_range.key,
        "label": time_range.label,
        "seconds": time_range.seconds,
        "ahead": ahead,
        "live": time_range.live,
        "step": time_range.step,
        "now": now,
    }
