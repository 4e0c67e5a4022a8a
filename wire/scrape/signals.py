"""How one load metric is derived from an engine's scrapes: a gauge, a rate, a mean, a quantile, or the first present.

An engine's mapping (``engines.py``) is a table of these signals. Each reads an ``Interval`` — the newest scrape,
the one before it for rates, and the oldest within the quantile window — and answers a value or ``None``. Rates and
histogram quantiles need an earlier scrape, so the first scrape after start (or after a long gap) has none of them.
When a signal has no value, ``why_absent`` says why in a few fixed words (the agent serves it as a label value).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from wire.scrape.arithmetic import (
    Combine,
    Families,
    LabelSet,
    bucket_increase,
    gauge,
    histogram,
    histogram_quantile,
    summary_quantile,
    total_increase,
)

NEEDS_SECOND_SCRAPE = "needs a second scrape"
NOTHING_FINISHED = "no request finished in the window"


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
    """One value derived from an interval of scrapes; ``None`` when it cannot be measured, and then why."""

    def families(self) -> Iterator[str]: ...

    def value(self, interval: Interval) -> float | None: ...

    def why_absent(self, interval: Interval) -> str: ...


def not_exposed(family: str, where: LabelSet = frozenset()) -> str:
    """The reason for a family the endpoint does not serve: ``nv_trt_llm_request_metrics{request_type=waiting}``."""
    selected = ",".join(f"{k}={v}" for k, v in sorted(where))
    return f"{family}{{{selected}}} is not exposed" if selected else f"{family} is not exposed"


@dataclass(frozen=True)
class Gauge:
    """An instantaneous value combined over the selected label sets; present from the first scrape.

    ``collapse`` names labels whose values are copies of one state (SGLang's ``tp_rank``): their series count once.
    """

    family: str
    combine: Combine = math.fsum
    scale: float = 1.0
    where: LabelSet = frozenset()
    collapse: frozenset[str] = frozenset()

    def families(self) -> Iterator[str]:
        yield self.family

    def value(self, interval: Interval) -> float | None:
        found = gauge(interval.current.families, self.family, self.combine, self.where, self.collapse)
        return None if found is None else found * self.scale

    def why_absent(self, interval: Interval) -> str:
        return not_exposed(self.family, self.where)


@dataclass(frozen=True)
class Rate:
    """Per-second increase of counter-like samples since the previous scrape, summed over families and label sets.

    Worked: ``vllm:generation_tokens_total`` 356 880 → 361 095 in 10 s → 421.5 tokens/s.
    """

    names: tuple[str, ...]
    suffix: str = "_total"
    scale: float = 1.0
    where: LabelSet = frozenset()
    collapse: frozenset[str] = frozenset()

    def families(self) -> Iterator[str]:
        yield from self.names

    def value(self, interval: Interval) -> float | None:
        previous = interval.previous
        if previous is None:
            return None
        current = interval.current
        increase = total_increase(
            previous.families, current.families, self.names, self.suffix, self.where, self.collapse
        )
        return None if increase is None else increase * self.scale / (current.at_s - previous.at_s)

    def why_absent(self, interval: Interval) -> str:
        if interval.previous is None:
            return NEEDS_SECOND_SCRAPE
        return " and ".join(not_exposed(name + self.suffix, self.where) for name in self.names)


@dataclass(frozen=True)
class SameLabelAs:
    """A rate over only the series whose ``label`` value also appears in ``family``.

    Triton counts a request once per model it passes: through an ensemble of preprocessing, ``tensorrt_llm`` and
    postprocessing, ``nv_inference_request_success`` grows by 4. The TensorRT-LLM backend's own family
    (``nv_trt_llm_request_metrics{model="tensorrt_llm"}``) names the one model that counts each request once.
    """

    rate: Rate
    family: str
    label: str = "model"

    def families(self) -> Iterator[str]:
        yield from self.rate.families()
        yield self.family

    def value(self, interval: Interval) -> float | None:
        return self._selected(interval).value(interval)

    def why_absent(self, interval: Interval) -> str:
        if self.family not in interval.current.families:
            return not_exposed(self.family)
        return self._selected(interval).why_absent(interval)

    def _selected(self, interval: Interval) -> Rate:
        found = interval.current.families.get(self.family)
        values = {s.labels[self.label] for s in found.samples if self.label in s.labels} if found else set()
        # no value selects nothing: an empty selector would select every series
        where = frozenset((self.label, v) for v in values) or frozenset({(self.label, "")})
        return replace(self.rate, where=self.rate.where | where)


@dataclass(frozen=True)
class Mean:
    """Increase of a cumulative total over increase of a count since the previous scrape; no events → ``None``.

    Worked: Triton's ``nv_inference_request_duration_us`` +47 094 000 over +1 200 successes → 39 245 µs.
    """

    total: Signal
    count: Signal

    def families(self) -> Iterator[str]:
        yield from self.total.families()
        yield from self.count.families()

    def value(self, interval: Interval) -> float | None:
        total, count = self.total.value(interval), self.count.value(interval)
        if total is None or count is None or count <= 0:
            return None
        return total / count

    def why_absent(self, interval: Interval) -> str:
        for signal in (self.total, self.count):
            if signal.value(interval) is None:
                return signal.why_absent(interval)
        return NOTHING_FINISHED


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

    def why_absent(self, interval: Interval) -> str:
        if histogram(interval.current.families, self.family) is None:
            return not_exposed(self.family)
        return NEEDS_SECOND_SCRAPE if interval.window_start is None else NOTHING_FINISHED


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

    def why_absent(self, interval: Interval) -> str:
        if self.family not in interval.current.families:
            return not_exposed(self.family)
        return "no request finished in the engine's summary window"


@dataclass(frozen=True)
class FirstOf:
    """The first of several signals that has a value: a renamed metric, or a fallback source."""

    signals: tuple[Signal, ...]

    def families(self) -> Iterator[str]:
        for signal in self.signals:
            yield from signal.families()

    def value(self, interval: Interval) -> float | None:
        return next((v for s in self.signals if (v := s.value(interval)) is not None), None)

    def why_absent(self, interval: Interval) -> str:
        """The first reason that is not a missing family (the one that would have answered), else all of them."""
        reasons = [s.why_absent(interval) for s in self.signals]
        return next((r for r in reasons if not r.endswith(" is not exposed")), " and ".join(reasons))
