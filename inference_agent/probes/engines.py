"""Engine probes: an external engine's Prometheus endpoint turned into one pool replica's load metrics.

One table per engine says which of its families give which catalog metric (CONTRACT section 4) and which extras;
``EngineScrapeProbe`` fetches, parses, keeps the recent scrapes and derives a ``Reading`` from the table. What an
engine does not expose (KV cache in TGI and Triton, tokens in Triton) stays absent, never a zero.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from collector.catalog import metric
from inference_agent.probes.base import Reading
from inference_agent.probes.engine_signals import (
    FirstOf,
    Gauge,
    HistogramQuantile,
    Interval,
    Mean,
    Rate,
    Scrape,
    ScrapeHistory,
    Signal,
    SummaryQuantile,
)
from inference_agent.probes.exposition_fetch import Fetch, HttpFetch, ScrapeFailed
from inference_agent.probes.exposition_math import UnparsableExposition, mean, parse_families


class EngineKind(StrEnum):
    """The engines ``fleetpilot agent --workload KIND=URL`` can scrape."""

    VLLM = "vllm"
    TGI = "tgi"
    TRITON = "triton"


@dataclass(frozen=True)
class EngineMapping:
    """Which signals give an engine's catalog metrics (by catalog name) and its extras."""

    metrics: Mapping[str, Signal]
    extra: Mapping[str, Signal]

    def families(self) -> frozenset[str]:
        """Every family the mapping reads; the rest of a scrape is dropped right after parsing."""
        return frozenset(f for signal in (*self.metrics.values(), *self.extra.values()) for f in signal.families())


VLLM = EngineMapping(
    metrics={
        # vLLM counts no arrivals. The e2e histogram observes every finished request once (stop, length or abort;
        # v0 and v1 alike), so its count is the completion rate of exactly the requests the p99 describes: equal
        # to arrivals in steady state, and a growing queue shows the difference. request_success is the fallback.
        "request_rate_per_second": FirstOf(
            (Rate(("vllm:e2e_request_latency_seconds",), "_count"), Rate(("vllm:request_success",)))
        ),
        "queue_depth_requests": Gauge("vllm:num_requests_waiting"),
        "token_throughput_per_second": Rate(("vllm:generation_tokens",)),
        "request_latency_p99_seconds": HistogramQuantile("vllm:e2e_request_latency_seconds"),
        # renamed in vLLM 0.9 (both exposed for a while); one ratio per data-parallel engine of equal size → mean
        "kv_cache_utilization_ratio": FirstOf(
            (Gauge("vllm:kv_cache_usage_perc", mean), Gauge("vllm:gpu_cache_usage_perc", mean))
        ),
    },
    extra={
        "requests_running": Gauge("vllm:num_requests_running"),
        "prompt_tokens_per_second": Rate(("vllm:prompt_tokens",)),
        "time_to_first_token_p99_seconds": HistogramQuantile("vllm:time_to_first_token_seconds"),
        "preemptions_per_second": Rate(("vllm:num_preemptions",)),
    },
)

TGI = EngineMapping(
    metrics={
        # incremented as each request arrives, before validation
        "request_rate_per_second": Rate(("tgi_request_count",)),
        "queue_depth_requests": Gauge("tgi_queue_size"),
        # TGI counts generated tokens per finished request only, in this histogram's sum: a lumpier rate than vLLM's
        "token_throughput_per_second": Rate(("tgi_request_generated_tokens",), "_sum"),
        "request_latency_p99_seconds": HistogramQuantile("tgi_request_duration"),
    },
    extra={
        "requests_running": Gauge("tgi_batch_current_size"),
        "failed_requests_per_second": Rate(("tgi_request_failure",)),
        "queue_time_p99_seconds": HistogramQuantile("tgi_request_queue_duration"),
    },
)

_TRITON_SUCCESS = Rate(("nv_inference_request_success",))

TRITON = EngineMapping(
    metrics={
        "request_rate_per_second": Rate(("nv_inference_request_success", "nv_inference_request_failure")),
        "queue_depth_requests": Gauge("nv_inference_pending_request_count"),
        # only with --metrics-config summary_latencies=true: Triton's own sliding window, the largest over models
        "request_latency_p99_seconds": SummaryQuantile("nv_inference_request_summary_us", scale=1e-6),
    },
    extra={
        "failed_requests_per_second": Rate(("nv_inference_request_failure",)),
        "request_latency_mean_seconds": Mean(Rate(("nv_inference_request_duration_us",), scale=1e-6), _TRITON_SUCCESS),
        "queue_time_mean_seconds": Mean(Rate(("nv_inference_queue_duration_us",), scale=1e-6), _TRITON_SUCCESS),
        # histogram_latencies=true, decoupled models only: the first streamed response, not the whole request
        "time_to_first_response_p99_seconds": HistogramQuantile("nv_inference_first_response_histogram_ms", scale=1e-3),
    },
)

MAPPINGS: dict[EngineKind, EngineMapping] = {EngineKind.VLLM: VLLM, EngineKind.TGI: TGI, EngineKind.TRITON: TRITON}


def derive_reading(mapping: EngineMapping, interval: Interval, pool: str) -> Reading:
    """The pool replica's reading for ``interval``; a value outside its catalog range is dropped, named in ``error``."""
    metrics: dict[str, float] = {}
    rejected: list[str] = []
    for name, signal in mapping.metrics.items():
        value = signal.value(interval)
        if value is None:
            continue
        if _in_catalog_range(name, value):
            metrics[name] = value
        else:
            rejected.append(f"{name}={value:g} is outside its range")
    extra = {name: v for name, s in mapping.extra.items() if (v := s.value(interval)) is not None and math.isfinite(v)}
    return Reading(metrics=metrics, pool=pool, extra=extra, error="; ".join(rejected) or None)


def _in_catalog_range(name: str, value: float) -> bool:
    entry = metric(name)
    return math.isfinite(value) and entry.minimum <= value and (entry.maximum is None or value <= entry.maximum)


class EngineScrapeProbe:
    """Scrapes one engine's ``/metrics`` each ``read()`` and reports its pool replica (a ``Probe``).

    A failed scrape answers a reading with no metrics and ``error`` set; the scrapes before it stay the baseline
    for rates until ``max_gap_s`` has passed. ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        kind: EngineKind | str,
        url: str,
        pool: str,
        *,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 10.0,
        max_gap_s: float = 30.0,
        timeout_s: float = 2.0,
    ) -> None:
        self.kind = EngineKind(kind)
        self.url = url
        self.pool = pool
        self.name = f"engine-{self.kind}"
        self._mapping = MAPPINGS[self.kind]
        self._families = self._mapping.families()
        self._own_fetch: HttpFetch | None = None
        if fetch is None:
            fetch = self._own_fetch = HttpFetch(timeout_s)
        self._fetch = fetch
        self._clock = clock
        self._history = ScrapeHistory(window_s, max_gap_s)

    def read(self) -> list[Reading]:
        """One reading for the pool: what this scrape and the recent ones measure, or why nothing could be read."""
        at_s = self._clock()
        try:
            families = parse_families(self._fetch(self.url), self._families)
        except ScrapeFailed as exc:
            return [self._failed(str(exc))]
        except UnparsableExposition as exc:
            return [self._failed(f"not Prometheus text ({exc})")]
        if not families:
            return [self._failed(f"none of the {self.kind} metrics (is it a {self.kind} endpoint?)")]
        return [derive_reading(self._mapping, self._history.add(Scrape(at_s, families)), self.pool)]

    def close(self) -> None:
        """Close the HTTP client this probe opened; an injected fetch belongs to whoever made it."""
        if self._own_fetch is not None:
            self._own_fetch.close()

    def _failed(self, why: str) -> Reading:
        return Reading(metrics={}, pool=self.pool, error=f"{self.kind} scrape of {self.url} failed: {why}")
