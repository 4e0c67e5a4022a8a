"""A built-in replica's ``GET /metrics`` in vLLM's names, so the agent reads it through the same adapter as a vLLM.

Names, types, labels and buckets follow vLLM's ``PrometheusStatLogger`` in ``vllm/v1/metrics/loggers.py``
(vllm-project/vllm at commit 005a810, the v0.10 series): every family is labelled ``model_name`` (the replica's
served model name, else its pool) and ``engine`` (always ``"0"``: one engine core per replica). What is exposed:

- ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (gauges): the engine's running and queued requests;
- ``vllm:kv_cache_usage_perc`` (gauge, 0..1): KV blocks used / total; absent for an engine without a KV cache
  (a classify replica);
- ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:num_preemptions_total`` (counters, text
  replicas only): the engine's cumulative counts (preemptions are its swap-outs);
- ``vllm:request_success_total{finished_reason}`` (counter): finished requests by stop / length / abort (a classify
  request finishes ``stop``);
- ``vllm:e2e_request_latency_seconds``, ``vllm:time_to_first_token_seconds`` (histograms): end to end, and to the
  first generated token, both from the moment the request entered the front end's queue.

The collector reads the engine's stats and the histograms at scrape time (no ``_created`` series, which vLLM
does not expose either).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from inference_agent.torch_runtime.api import EngineStats, FinishReason, TokenEvent

LABELS = ("model_name", "engine")
ENGINE_INDEX = "0"
# vLLM's ``request_latency_buckets`` and its time-to-first-token buckets, in seconds
E2E_BUCKETS_S: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0)
E2E_BUCKETS_S += (60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
TTFT_BUCKETS_S += (5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


class CumulativeHistogram:
    """Counts per bucket (``le`` inclusive, as Prometheus means it) and the sum, since the replica started."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._lock = threading.Lock()
        self._counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self._sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect_left(self.bounds, value)] += 1
            self._sum += value

    def buckets(self) -> tuple[list[tuple[str, float]], float]:
        """(``le`` → cumulative count, +Inf last) and the sum: 0.4 s and 0.9 s → le 0.3: 0, le 0.5: 1, le 1.0: 2."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), counts, strict=True):
            running += count
            cumulative.append((bound, float(running)))
        return cumulative, total


class ReplicaMetrics:
    """The replica's vLLM-named families: the handler reports first tokens and finished requests, the engine's
    stats are read at scrape time."""

    def __init__(self, model_name: str, kind: str, engine_stats: Callable[[], EngineStats | None]) -> None:
        self.model_name = model_name
        self.kind = kind
        self._engine_stats = engine_stats
        self.e2e = CumulativeHistogram(E2E_BUCKETS_S)
        self.ttft = CumulativeHistogram(TTFT_BUCKETS_S)
        self._lock = threading.Lock()
        self._finished = dict.fromkeys(FinishReason, 0)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_VllmCollector(self))

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def finished(self, e2e_seconds: float, reason: FinishReason) -> None:
        with self._lock:
            self._finished[reason] += 1
        self.e2e.observe(e2e_seconds)

    def finished_counts(self) -> dict[FinishReason, int]:
        with self._lock:
            return dict(self._finished)

    def engine_stats(self) -> EngineStats | None:
        return self._engine_stats()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def timed_first_token(events: Iterator[TokenEvent], started_s: float, metrics: ReplicaMetrics) -> Iterator[TokenEvent]:
    """``events`` unchanged; the first generated token's time since ``started_s`` (monotonic) goes to the TTFT
    histogram (an abort before any token observes nothing)."""
    first = True
    for event in events:
        if first and event.finish_reason is not FinishReason.ABORT:
            metrics.first_token(time.monotonic() - started_s)
            first = False
        yield event


class _VllmCollector(Collector):
    def __init__(self, metrics: ReplicaMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        metrics = self._metrics
        labels = [metrics.model_name, ENGINE_INDEX]
        stats = metrics.engine_stats()
        if stats is not None:
            yield from _engine_families(stats, labels, text=metrics.kind == "text")
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.", labels=[*LABELS, "finished_reason"]
        )
        for reason, count in metrics.finished_counts().items():
            success.add_metric([*labels, reason.value], count)
        yield success
        doc = "Histogram of e2e request latency in seconds."
        yield _histogram("vllm:e2e_request_latency_seconds", doc, labels, metrics.e2e)
        if metrics.kind == "text":
            doc = "Histogram of time to first token in seconds."
            yield _histogram("vllm:time_to_first_token_seconds", doc, labels, metrics.ttft)


StatOf = Callable[[EngineStats], float]
GAUGES: tuple[tuple[str, str, StatOf], ...] = (
    ("vllm:num_requests_running", "Number of requests in model execution batches.", lambda s: s.running),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda s: s.waiting),
)
TEXT_COUNTERS: tuple[tuple[str, str, StatOf], ...] = (
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda s: s.prompt_tokens),
    ("vllm:generation_tokens", "Number of generation tokens processed.", lambda s: s.generated_tokens),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda s: s.swaps_out),
)


def _engine_families(stats: EngineStats, labels: list[str], *, text: bool) -> Iterator[Metric]:
    for name, documentation, stat in GAUGES:
        yield _family(GaugeMetricFamily(name, documentation, labels=LABELS), labels, stat(stats))
    kv = stats.kv_utilization_ratio
    if kv is not None:
        doc = "KV-cache usage. 1 means 100 percent usage."
        yield _family(GaugeMetricFamily("vllm:kv_cache_usage_perc", doc, labels=LABELS), labels, min(1.0, kv))
    for name, documentation, stat in TEXT_COUNTERS if text else ():
        yield _family(CounterMetricFamily(name, documentation, labels=LABELS), labels, stat(stats))


def _family(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float) -> Metric:
    family.add_metric(labels, value)
    return family


def _histogram(name: str, documentation: str, labels: list[str], histogram: CumulativeHistogram) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=LABELS)
    buckets, total = histogram.buckets()
    family.add_metric(labels, buckets, total)
    return family
