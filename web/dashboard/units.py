"""Numbers as people read them, with their unit: 0.834 → "83 %", 61203283968 bytes → "57.0 GiB", 0.1204 s → "120 ms".

The unit comes from the metric catalog, so a metric added there is shown right everywhere. An absent figure is an
em dash, never a made-up zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from wire.catalog import BY_NAME

ABSENT = "—"
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL = ("B/s", "kB/s", "MB/s", "GB/s", "TB/s")


def _scaled(value: float, base: float, units: tuple[str, ...]) -> str:
    index = 0
    while abs(value) >= base and index < len(units) - 1:
        value /= base
        index += 1
    return f"{value:.0f} {units[index]}" if index == 0 else f"{value:.1f} {units[index]}"


def number(value: float, digits: int = 3) -> str:
    """Three significant digits, thousands separated: 41.53 → "41.5", 12345.6 → "12,346"."""
    if value == 0 or abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def duration(seconds: float) -> str:
    """0.0123 → "12.3 ms", 42 → "42.0 s", 3720 → "1 h 2 min"."""
    if abs(seconds) < 1:
        return f"{number(seconds * 1000)} ms"
    if abs(seconds) < 120:
        return f"{seconds:.1f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def ratio(value: float) -> str:
    return f"{value * 100:.0f} %"


_BY_UNIT: dict[str, Callable[[float], str]] = {
    "ratio": ratio,
    "bytes": lambda v: _scaled(v, 1024.0, _BINARY),
    "bytes_per_second": lambda v: _scaled(v, 1000.0, _DECIMAL),
    "seconds": duration,
    "watts": lambda v: f"{number(v)} W",
    "celsius": lambda v: f"{v:.0f} °C",
    "per_second": lambda v: f"{number(v)} /s",
    "requests": lambda v: f"{number(v)} req",
}


def by_unit(unit: str, value: float | None) -> str:
    """``value`` in ``unit`` (a catalog unit); absent or not finite → an em dash."""
    if value is None or not math.isfinite(value):
        return ABSENT
    return _BY_UNIT.get(unit, number)(value)


def metric_value(metric_name: str, value: float | None) -> str:
    """``value`` of the catalog metric ``metric_name`` in its unit."""
    return by_unit(BY_NAME[metric_name].unit, value)


def timestamp(ts: float | None) -> str:
    """Unix seconds as UTC wall time, ``2025-11-29 14:00:05 UTC``."""
    if ts is None:
        return ABSENT
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float | None) -> str:
    """How long ago: 0.4 → "now", 75 → "1 min ago"."""
    if seconds is None:
        return ABSENT
    if seconds < 1:
        return "now"
    return f"{duration(seconds)} ago"


SOURCE_NAMES = {"remote_write": "Prometheus remote write", "otlp": "OTLP"}


def reporters(sources: Iterable[str]) -> str:
    """Who reports something, from its nodes' sources: ``agents``, ``Prometheus remote write``, or ``agents and
    OTLP`` (a Prometheus-only fleet said "Reported by agents")."""
    found = set(sources)
    names = (["agents"] if found - set(SOURCE_NAMES) else []) + [
        name for source, name in SOURCE_NAMES.items() if source in found
    ]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names) or "no node"


def reported_by(source: str, resolution_seconds: float | None) -> str:
    """Who reports a node, with how often: ``agent every 500 ms`` or ``Prometheus remote write every 15 s`` (a
    scraped node's samples are its scrape interval apart; nobody should read them as the agent's 500 ms)."""
    if source not in SOURCE_NAMES:
        return "agent every 500 ms"
    every = f" every {duration(resolution_seconds)}" if resolution_seconds else ""
    return f"{SOURCE_NAMES[source]}{every}"
