"""One group's staged points at one scrape time → its load metrics, with the agent's engine signals.

A group is what one source says about one (node, GPU, pool). Its points at one timestamp are one scrape: they
become the families a signal reads (``wire.scrape``), and the scrape before it and the oldest one within the
quantile window give rates and p99, exactly as the agent's ``ScrapeHistory`` would have kept them. Pure.

Prometheus sends no types (remote write 1.0 carries names and values only): a series named like its family, with
no ``_total`` (TGI's ``tgi_request_count``), is offered both as a gauge and as a counter sample, as the exposition
parser's rename would have made it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from wire.samples import BIGINT_MAX
from wire.scrape.arithmetic import Families
from wire.scrape.engines import Derived, EngineMapping, derive
from wire.scrape.signals import Gauge, Interval, Scrape

QUANTILE_WINDOW_SECONDS = 10.0  # CONTRACT section 4: p99 over the trailing 10 s (or the scrape interval, if longer)


@dataclass(frozen=True)
class SeriesInfo:
    """What a stored series is: its family, its own name and its labels (``__name__`` left out)."""

    family: str
    name: str
    labels: Mapping[str, str]


Point = tuple[int, float]  # (series id, value) at one timestamp


def families(points: Iterable[Point], info: Mapping[int, SeriesInfo]) -> Families:
    """The families one scrape's points make; a point of an unknown series is skipped."""
    found: Families = {}
    for series, value in points:
        known = info.get(series)
        if known is None:
            continue
        family = found.get(known.family)
        if family is None:
            family = found[known.family] = Metric(known.family, "", "untyped")
        labels = dict(known.labels)
        family.add_sample(known.name, labels, value)
        if known.name == known.family:
            family.add_sample(known.name + "_total", labels, value)
    return found


def interval_at(ts: float, times: Sequence[float], *, max_gap_seconds: float) -> tuple[float | None, float | None]:
    """The previous scrape time and the window's oldest one for the scrape at ``ts`` (``times`` sorted, holding it).

    As ``ScrapeHistory``: a gap over ``max_gap_seconds`` forgets what came before; the window start is the oldest
    scrape within ``QUANTILE_WINDOW_SECONDS``, or the previous one when all are older. Worked: times 0, 15, 30 →
    at 30: previous 15, window start 15; times 0, 5, 10, 15 → at 15: previous 10, window start 5.
    """
    i = times.index(ts)
    chain_start = i
    while chain_start > 0 and times[chain_start] - times[chain_start - 1] <= max_gap_seconds:
        chain_start -= 1
    if chain_start == i:
        return None, None
    previous = times[i - 1]
    window = next((t for t in times[chain_start:i] if ts - t <= QUANTILE_WINDOW_SECONDS), previous)
    return previous, window


def derive_at(
    table: EngineMapping,
    ts: float,
    scrapes: Mapping[float, Families],
    times: Sequence[float],
    *,
    max_gap_seconds: float,
) -> tuple[Derived, float | None]:
    """The metrics ``table`` derives at ``ts`` from the group's ``scrapes`` (by time), and the interval since the
    previous scrape (``None`` for the first one)."""
    previous, window = interval_at(ts, times, max_gap_seconds=max_gap_seconds)
    interval = Interval(
        Scrape(ts, scrapes[ts]),
        None if previous is None else Scrape(previous, scrapes[previous]),
        None if window is None else Scrape(window, scrapes[window]),
    )
    return derive(table, interval), None if previous is None else ts - previous


def memory_total_at(total: tuple[Sequence[Gauge], Sequence[Gauge]], ts: float, scrape: Families) -> int | None:
    """A GPU's memory size in bytes from one scrape: every needed gauge present, plus the optional ones that are
    (``MemoryTotalSpec``); None when a needed one is missing or the sum is no size a BIGINT column holds. Worked:
    FB_USED 40960, FB_FREE 40448, FB_RESERVED 512 MiB → 81920 × 1048576 = 85899345920 bytes; without FB_RESERVED,
    81408 MiB."""
    needed, optional = total
    interval = Interval(Scrape(ts, scrape), None, None)
    parts = [g.value(interval) for g in needed]
    found = [v for v in parts if v is not None]
    if len(found) < len(parts):
        return None
    found += [v for g in optional if (v := g.value(interval)) is not None]
    size = math.fsum(found)
    return round(size) if 0 < size <= BIGINT_MAX else None  # 1e13 MiB of FB_FREE is past it: not measured
