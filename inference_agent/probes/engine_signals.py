"""How one load metric is derived from an engine's scrapes: a gauge, a rate, a mean, a quantile, or the first present.

An engine's mapping (``engines.py``) is a table of these signals. Each reads an ``Interval`` — the newest scrape,
the one before it for rates, and the oldest within the quantile window — and answers a value or ``None``. Rates and
histogram quantiles need an earlier scrape, so the first scrape after start (or after a long gap) has none of them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from inference_agent.probes.exposition_math import (
    Combine,
    Families,
    bucket_increase,
    gauge,
    histogram,
    histogram_quantile,
    summary_quantile,
    total_increase,
)


@dataclass(frozen=True)
class Scrape:
    """One successful scrape: when (monotonic seconds) and the families it exposed."""

    at_s: float
    families: Families


@dataclass(frozen=True)
class Interval:
    """What a signal sees: the newest scrape, the one before it (rates) and the oldest within the window (quantiles)."""

    current: Scrape
    previous: Scrape | None = None
    window_start: Scrape | None = None


class ScrapeHistory:
    """The recent scrapes of one endpoint; a gap over ``max_gap_s`` forgets them rather than average across it.

    Worked: window 10 s, scrapes every 0.5 s → quantiles over the trailing 10 s, rates over the last 0.5 s. With
    scrapes 20 s apart (under a 30 s gap) both span the 20 s since the last one; after a 40 s outage neither exists.
    """

    def __init__(self, window_s: float = 10.0, max_gap_s: float = 30.0) -> None:
        if window_s <= 0 or max_gap_s <= 0:
            raise ValueError(f"window_s ({window_s}) and max_gap_s ({max_gap_s}) must be positive")
        self.window_s = window_s
        self.max_gap_s = max_gap_s
        self._scrapes: deque[Scrape] = deque()

    def add(self, scrape: Scrape) -> Interval:
        """Record ``scrape`` and answer the interval that ends with it."""
        if self._scrapes and not 0 < scrape.at_s - self._scrapes[-1].at_s <= self.max_gap_s:
            self._scrapes.clear()
        # keep the oldest scrape still inside the window, or the latest one when all are older
        while len(self._scrapes) > 1 and scrape.at_s - self._scrapes[0].at_s > self.window_s:
            self._scrapes.popleft()
        previous = self._scrapes[-1] if self._scrapes else None
        window_start = self._scrapes[0] if self._scrapes else None
        self._scrapes.append(scrape)
        return Interval(scrape, previous, window_start)


class Signal(Protocol):
    """One value derived from an interval of scrapes; ``None`` when it cannot be measured."""

    def families(self) -> Iterator[str]: ...

    def value(self, interval: Interval) -> float | None: ...


@dataclass(frozen=True)
class Gauge:
    """An instantaneous value combined over label sets; present from the first scrape."""

    family: str
    combine: Combine = math.fsum
    scale: float = 1.0

    def families(self) -> Iterator[str]:
        yield self.family

    def value(self, interval: Interval) -> float | None:
        found = gauge(interval.current.families, self.family, self.combine)
        return None if found is None else found * self.scale


@dataclass(frozen=True)
class Rate:
    """Per-second increase of counter-like samples since the previous scrape, summed over families and label sets.

    Worked: ``vllm:generation_tokens_total`` 356 880 → 361 095 in 10 s → 421.5 tokens/s.
    """

    names: tuple[str, ...]
    suffix: str = "_total"
    scale: float = 1.0

    def families(self) -> Iterator[str]:
        yield from self.names

    def value(self, interval: Interval) -> float | None:
        previous = interval.previous
        if previous is None:
            return None
        increase = total_increase(previous.families, interval.current.families, self.names, self.suffix)
        return None if increase is None else increase * self.scale / (interval.current.at_s - previous.at_s)


@dataclass(frozen=True)
class Mean:
    """Increase of a cumulative total over increase of a count since the previous scrape; no events → ``None``.

    Worked: Triton's ``nv_inference_request_duration_us`` +47 094 000 over +1 200 successes → 39 245 µs.
    """

    total: Rate
    count: Rate

    def families(self) -> Iterator[str]:
        yield from self.total.families()
        yield from self.count.families()

    def value(self, interval: Interval) -> float | None:
        total, count = self.total.value(interval), self.count.value(interval)
        if total is None or count is None or count <= 0:
            return None
        return total / count


@dataclass(frozen=True)
class HistogramQuantile:
    """A quantile of the observations a histogram gained over the window (PromQL ``histogram_quantile``)."""

    family: str
    quantile: float = 0.99
    scale: float = 1.0

    def families(self) -> Iterator[str]:
        yield self.family

    def value(self, interval: Interval) -> float | None:
        start, current = interval.window_start, histogram(interval.current.families, self.family)
        if start is None or current is None:
            return None
        found = histogram_quantile(self.quantile, bucket_increase(histogram(start.families, self.family), current))
        return None if found is None else found * self.scale


@dataclass(frozen=True)
class SummaryQuantile:
    """A quantile an engine computes itself over its own sliding window (Triton's summaries); the largest one."""

    family: str
    quantile: float = 0.99
    scale: float = 1.0

    def families(self) -> Iterator[str]:
        yield self.family

    def value(self, interval: Interval) -> float | None:
        found = summary_quantile(interval.current.families, self.family, self.quantile)
        return None if found is None else found * self.scale


@dataclass(frozen=True)
class FirstOf:
    """The first of several signals that has a value: a renamed metric, or a fallback source."""

    signals: tuple[Signal, ...]

    def families(self) -> Iterator[str]:
        for signal in self.signals:
            yield from signal.families()

    def value(self, interval: Interval) -> float | None:
        return next((v for s in self.signals if (v := s.value(interval)) is not None), None)
