"""Each engine's table: which of its Prometheus families give which catalog metric (CONTRACT section 4), which
extras, and why the others are absent.

What an engine does not expose (KV cache in TGI, requests in llama.cpp, tokens in Triton without TensorRT-LLM) stays
absent, never a zero. Each table names the upstream source it follows; the fixtures in
``inference_agent/probes/fixtures/engines`` (README there) are written from the same sources. The agent's engine
probes read them from an engine's ``/metrics``, the remote-write receiver from the series a Prometheus sends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from wire.catalog import metric
from wire.samples import METRIC_VALUE_MAX
from wire.scrape.arithmetic import count, selector
from wire.scrape.signals import (
    FirstOf,
    Gauge,
    HistogramQuantile,
    Interval,
    Mean,
    Rate,
    SameLabelAs,
    Signal,
    SummaryQuantile,
)


class EngineKind(StrEnum):
    """The engines the agent can scrape (``--workload KIND=URL``, ``--engine POOL=KIND=URL``, a profile's kind)."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    TRITON = "triton"
    LLAMACPP = "llamacpp"


@dataclass(frozen=True)
class EngineMapping:
    """Which signals give an engine's catalog metrics (by catalog name), why the others are absent, and its extras."""

    metrics: Mapping[str, Signal]
    extra: Mapping[str, Signal]
    # catalog metrics the engine has no source for at all, with the reason served on the agent's /metrics
    unexposed: Mapping[str, str] = field(default_factory=dict)

    def families(self) -> frozenset[str]:
        """Every family the mapping reads; the rest of a scrape is dropped right after parsing."""
        return frozenset(f for signal in (*self.metrics.values(), *self.extra.values()) for f in signal.families())


# vllm/v1/metrics/loggers.py (PrometheusStatLogger); V0's vllm/engine/metrics.py for the old KV name
VLLM = EngineMapping(
    metrics={
        # vLLM counts no arrivals. The e2e histogram observes every finished request once (stop, length or abort;
        # v0 and v1 alike), so its count is the completion rate of exactly the requests the p99 describes: equal
        # to arrivals in steady state, and a growing queue shows the difference. request_success is the fallback.
        # With data parallelism each engine has its own `engine` label: rates and queues sum over them.
        "request_rate_per_second": FirstOf(
            (Rate(("vllm:e2e_request_latency_seconds",), "_count"), Rate(("vllm:request_success",)))
        ),
        "queue_depth_requests": Gauge("vllm:num_requests_waiting"),
        "token_throughput_per_second": Rate(("vllm:generation_tokens",)),
        "request_latency_p99_seconds": HistogramQuantile("vllm:e2e_request_latency_seconds"),
        # one ratio per data-parallel engine: the fullest one (a mean of 1.0 and 0.2 would hide that engine 0 preempts)
        # renamed in vLLM 0.9 (both exposed for a while)
        "kv_cache_utilization_ratio": FirstOf(
            (Gauge("vllm:kv_cache_usage_perc", max), Gauge("vllm:gpu_cache_usage_perc", max))
        ),
    },
    extra={
        "requests_running": Gauge("vllm:num_requests_running"),
        "prompt_tokens_per_second": Rate(("vllm:prompt_tokens",)),
        "time_to_first_token_p99_seconds": HistogramQuantile("vllm:time_to_first_token_seconds"),
        "preemptions_per_second": Rate(("vllm:num_preemptions",)),
        "data_parallel_engines": Gauge("vllm:num_requests_waiting", count),
        "queue_depth_fullest_engine_requests": Gauge("vllm:num_requests_waiting", max),
    },
)

# python/sglang/srt/metrics/collector.py and managers/scheduler_metrics_mixin.py.
# Scheduler gauges carry tp_rank and pp_rank: every rank of one engine runs the same scheduler, so its ranks report
# copies of one state (only rank 0 by default, all with --enable-metrics-for-all-schedulers); one counts, the max.
# dp_rank names different engines: summed. The tokenizer's counters and histograms carry neither label (one
# tokenizer process counts every request once, whatever the parallelism).
_SGLANG_RANKS = frozenset({"tp_rank", "pp_rank"})

SGLANG = EngineMapping(
    metrics={
        # counted when a request finishes, with its tokens and e2e latency (TokenizerMetricsCollector)
        "request_rate_per_second": Rate(("sglang:num_requests",)),
        "queue_depth_requests": Gauge("sglang:num_queue_reqs", collapse=_SGLANG_RANKS),
        "token_throughput_per_second": Rate(("sglang:generation_tokens",)),
        "request_latency_p99_seconds": HistogramQuantile("sglang:e2e_request_latency_seconds"),
        # tokens in use over the KV pool's size; the fullest data-parallel engine
        "kv_cache_utilization_ratio": Gauge("sglang:token_usage", max),
    },
    extra={
        "requests_running": Gauge("sglang:num_running_reqs", collapse=_SGLANG_RANKS),
        "prompt_tokens_per_second": Rate(("sglang:prompt_tokens",)),
        "time_to_first_token_p99_seconds": HistogramQuantile("sglang:time_to_first_token_seconds"),
        "aborted_requests_per_second": Rate(("sglang:num_aborted_requests",)),
        # the scheduler's own decode throughput, per iteration: smoother than the per-request token counter
        "engine_generation_tokens_per_second": Gauge("sglang:gen_throughput", collapse=_SGLANG_RANKS),
    },
)

# router/src/server.rs and router/src/infer/mod.rs of text-generation-inference
TGI = EngineMapping(
    metrics={
        # tgi_request_count is incremented by /v1/chat/completions and /v1/completions and again by the
        # generate_internal / generate_stream_internal they call: 2 per chat request. tgi_request_success (at the
        # end of a generation) and tgi_request_failure (where Infer refuses or fails one) count each request once.
        "request_rate_per_second": Rate(("tgi_request_success", "tgi_request_failure")),
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
    unexposed={"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"},
)

# Triton core src/metrics.cc; the TensorRT-LLM backend's custom_metrics_reporter.cc.
# The TensorRT-LLM backend's own family, one series per request_type. Triton counts a request once per model it
# passes (ensemble, preprocessing, tensorrt_llm, postprocessing: 4 times), so where the backend runs, the counters
# are read for its model alone, else for every model.
_TRT_LLM_REQUESTS = "nv_trt_llm_request_metrics"


def _trt_llm_model_first(rate: Rate) -> FirstOf:
    return FirstOf((SameLabelAs(rate, _TRT_LLM_REQUESTS), rate))


def _triton_mean_us(total: str) -> FirstOf:
    """Mean seconds per successful request of a cumulative-µs counter, the TensorRT-LLM model's where it runs."""
    total_rate, success = Rate((total,), scale=1e-6), Rate(("nv_inference_request_success",))
    return FirstOf(
        (
            Mean(SameLabelAs(total_rate, _TRT_LLM_REQUESTS), SameLabelAs(success, _TRT_LLM_REQUESTS)),
            Mean(total_rate, success),
        )
    )


TRITON = EngineMapping(
    metrics={
        "request_rate_per_second": _trt_llm_model_first(
            Rate(("nv_inference_request_success", "nv_inference_request_failure"))
        ),
        # the backend queues requests itself: Triton's pending count reads 0 for a TensorRT-LLM model
        "queue_depth_requests": FirstOf(
            (
                Gauge(_TRT_LLM_REQUESTS, where=selector(request_type="waiting")),
                Gauge("nv_inference_pending_request_count"),
            )
        ),
        # TensorRT-LLM only: a histogram of output tokens per response, so its sum grows by every token sent
        # (whether a response carries a whole request's tokens or one streamed chunk's)
        "token_throughput_per_second": Rate(("nv_llm_output_token_len",), "_sum"),
        # only with --metrics-config summary_latencies=true: Triton's own sliding window, the largest over models
        "request_latency_p99_seconds": SummaryQuantile("nv_inference_request_summary_us", scale=1e-6),
        "kv_cache_utilization_ratio": Gauge(
            "nv_trt_llm_kv_cache_block_metrics", max, where=selector(kv_cache_block_type="fraction")
        ),
    },
    extra={
        "requests_running": Gauge(_TRT_LLM_REQUESTS, where=selector(request_type="active")),
        "failed_requests_per_second": _trt_llm_model_first(Rate(("nv_inference_request_failure",))),
        "request_latency_mean_seconds": _triton_mean_us("nv_inference_request_duration_us"),
        "queue_time_mean_seconds": _triton_mean_us("nv_inference_queue_duration_us"),
        # histogram_latencies=true, decoupled models only: the first streamed response, not the whole request
        "time_to_first_response_p99_seconds": HistogramQuantile("nv_inference_first_response_histogram_ms", scale=1e-3),
    },
)

# the /metrics handler of llama.cpp's tools/server/server.cpp
LLAMACPP = EngineMapping(
    metrics={
        # tasks waiting for a free slot
        "queue_depth_requests": Gauge("llamacpp:requests_deferred"),
        # added to when a slot finishes its request: as lumpy as TGI's
        "token_throughput_per_second": Rate(("llamacpp:tokens_predicted",)),
        # older builds only (current tools/server/server.cpp no longer exports it)
        "kv_cache_utilization_ratio": Gauge("llamacpp:kv_cache_usage_ratio", max),
    },
    extra={
        "requests_running": Gauge("llamacpp:requests_processing"),
        "prompt_tokens_per_second": Rate(("llamacpp:prompt_tokens",)),
        "decode_calls_per_second": Rate(("llamacpp:n_decode",)),
    },
    unexposed={
        "request_rate_per_second": "llamacpp counts tokens, not requests",
        "request_latency_p99_seconds": "llamacpp exposes no latency histogram",
    },
)

MAPPINGS: dict[EngineKind, EngineMapping] = {
    EngineKind.VLLM: VLLM,
    EngineKind.SGLANG: SGLANG,
    EngineKind.TGI: TGI,
    EngineKind.TRITON: TRITON,
    EngineKind.LLAMACPP: LLAMACPP,
}

OUTSIDE_RANGE = "outside its catalog range"


@dataclass(frozen=True)
class Derived:
    """What one interval of an engine's scrapes measures: catalog metrics, why the others are absent, the extras, and
    the values dropped for lying outside their catalog range (``name=value is outside its range``)."""

    metrics: dict[str, float]
    absent: dict[str, str]
    extra: dict[str, float]
    rejected: list[str]


def derive(mapping: EngineMapping, interval: Interval) -> Derived:
    """The catalog metrics and extras ``mapping`` derives from ``interval``; a value outside its range is dropped."""
    metrics: dict[str, float] = {}
    absent = dict(mapping.unexposed)
    rejected: list[str] = []
    for name, signal in mapping.metrics.items():
        value = signal.value(interval)
        if value is None:
            absent[name] = signal.why_absent(interval)
        elif in_catalog_range(name, value):
            metrics[name] = value
        else:
            absent[name] = OUTSIDE_RANGE
            low, high = catalog_range(name)
            rejected.append(f"{name}={value:g} is outside its range {low:g}..{high:.2g}")
    extra = {name: v for name, s in mapping.extra.items() if (v := s.value(interval)) is not None and math.isfinite(v)}
    return Derived(metrics, absent, extra, rejected)


def in_catalog_range(name: str, value: float) -> bool:
    """Whether ``value`` is finite and within catalog metric ``name``'s range, as agent ingest bounds it (a metric
    without a maximum at most ``METRIC_VALUE_MAX``: 1e13 MiB scaled to bytes is past it)."""
    low, high = catalog_range(name)
    return math.isfinite(value) and low <= value <= high


def catalog_range(name: str) -> tuple[float, float]:
    entry = metric(name)
    return entry.minimum, METRIC_VALUE_MAX if entry.maximum is None else entry.maximum
