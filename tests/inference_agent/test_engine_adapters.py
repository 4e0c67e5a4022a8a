"""Each engine's adapter against two scrapes written from its upstream metric definitions, with the truth known.

The fixtures (``inference_agent/probes/fixtures/engines``, sources in their headers and the README there) are built
so that a wrong reading is a different number: TGI's chat traffic counts each request twice in
``tgi_request_count``, a Triton ensemble counts it once per model, SGLang repeats each gauge per tensor-parallel
rank, and one of vLLM's data-parallel engines is full while the other idles.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inference_agent.probes.base import Reading
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.probes.exposition_fetch import ReplayFetch, ScrapeFailed
from inference_agent.sampler import wire_sample
from inference_agent.telemetry import AgentTelemetry
from tests.support.clock import FakeClock
from wire.catalog import METRICS, Scope
from wire.samples import parse_batch
from wire.scrape.arithmetic import (
    Combine,
    LabelSet,
    Series,
    combine_series,
    matches,
    parse_families,
    samples,
    selector,
)
from wire.scrape.engines import MAPPINGS, EngineKind

URL = "http://10.0.0.7:8000/metrics"
STEP_S = 10.0
POOL_METRICS = {m.name for m in METRICS if m.scope is Scope.POOL_REPLICA}


def fixture(name: str) -> str:
    return files("inference_agent.probes").joinpath("fixtures", "engines", f"{name}.prom").read_text()


def probe_after(kind: str, names: list[str], **options: Any) -> tuple[EngineScrapeProbe, list[Reading]]:
    """A probe that has read each named fixture, ``STEP_S`` apart, and its readings."""
    clock = FakeClock(now=100.0)
    probe = EngineScrapeProbe(kind, URL, "chat", fetch=ReplayFetch([fixture(n) for n in names]), clock=clock, **options)
    out = []
    for _ in names:
        out.extend(probe.read())
        clock.advance(STEP_S)
    return probe, out


@pytest.mark.parametrize(
    ("kind", "first", "metrics", "extra"),
    [
        pytest.param(
            "vllm",
            "vllm_dp_scrape_1",
            # KV: the fullest engine (0.97), not the mean 0.64; queue: both engines' waiting, 7 + 0
            {"queue_depth_requests": 7.0, "kv_cache_utilization_ratio": 0.97},
            {"requests_running": 26.0, "data_parallel_engines": 2.0, "queue_depth_fullest_engine_requests": 7.0},
            id="vllm data parallel",
        ),
        pytest.param(
            "sglang",
            "sglang_scrape_1",
            # each gauge twice (tp_rank 0 and 1) per data-parallel engine: 5 + 3 waiting, not 16
            {"queue_depth_requests": 8.0, "kv_cache_utilization_ratio": 0.8},
            {"requests_running": 56.0, "engine_generation_tokens_per_second": 2650.0},
            id="sglang tp 2 dp 2",
        ),
        pytest.param(
            "triton",
            "triton_trtllm_scrape_1",
            # the backend's own waiting queue; nv_inference_pending_request_count reads 0 for every model
            {"queue_depth_requests": 5.0, "kv_cache_utilization_ratio": 0.62},
            {"requests_running": 48.0},
            id="triton tensorrt-llm",
        ),
        pytest.param("llamacpp", "llamacpp_scrape_1", {"queue_depth_requests": 2.0}, {"requests_running": 4.0}),
    ],
)
def test_first_scrape_has_gauges_only(
    kind: str, first: str, metrics: dict[str, float], extra: dict[str, float]
) -> None:
    _, [reading] = probe_after(kind, [first])
    assert reading == Reading(metrics=metrics, pool="chat", extra=extra)


@pytest.mark.parametrize(
    ("kind", "prefix", "metrics", "extra"),
    [
        pytest.param(
            "vllm",
            "vllm_dp",
            {
                "request_rate_per_second": 4.0,  # e2e counts +18 (engine 0) +22 (engine 1) in 10 s
                "queue_depth_requests": 10.0,  # 9 + 1
                "token_throughput_per_second": 550.0,  # +2 400 +3 100
                # pooled increases: 10 ≤ 2.5 s, 24 ≤ 5, 36 ≤ 10, 40 ≤ 15 → rank 39.6: 10 + 5 × 3.6 / 4
                "request_latency_p99_seconds": 14.5,
                "kv_cache_utilization_ratio": 1.0,  # engine 0 full; the mean would say 0.625
            },
            {
                "requests_running": 26.0,
                "prompt_tokens_per_second": 2000.0,
                "preemptions_per_second": 0.3,  # the full engine preempts: 12 → 15
                "data_parallel_engines": 2.0,
                "queue_depth_fullest_engine_requests": 9.0,
            },
            id="vllm data parallel, one engine full",
        ),
        pytest.param(
            "sglang",
            "sglang",
            {
                "request_rate_per_second": 4.0,  # sglang:num_requests_total 7 000 → 7 040
                "queue_depth_requests": 10.0,  # dp 0: 6 (both ranks), dp 1: 4; summed over ranks it would be 20
                "token_throughput_per_second": 600.0,
                # increases 2 ≤ 1 s, 10 ≤ 2, 30 ≤ 4, 38 ≤ 6, 40 ≤ 8 → rank 39.6: 6 + 2 × 1.6 / 2
                "request_latency_p99_seconds": 7.6,
                "kv_cache_utilization_ratio": 0.82,  # the fuller data-parallel engine
            },
            {
                "requests_running": 60.0,
                "prompt_tokens_per_second": 2000.0,
                "time_to_first_token_p99_seconds": 0.58,  # rank 39.6 in (0.4, 0.6] holding 4: 0.4 + 0.2 × 0.9
                "aborted_requests_per_second": 0.1,
                "engine_generation_tokens_per_second": 2800.5,
            },
            id="sglang tp 2 dp 2",
        ),
        pytest.param(
            "tgi",
            "tgi_chat",
            {
                # 34 successes + 2 failures; tgi_request_count grew by 72 (7.2/s), twice per chat request
                "request_rate_per_second": 3.6,
                "queue_depth_requests": 4.0,
                "token_throughput_per_second": 935.4,
                "request_latency_p99_seconds": 7.556412111992161,
            },
            {"requests_running": 15.0, "failed_requests_per_second": 0.2, "queue_time_p99_seconds": 0.2948394300670619},
            id="tgi chat completions",
        ),
        pytest.param(
            "triton",
            "triton_trtllm",
            {
                # tensorrt_llm +40; summed over the ensemble's 4 models it would read 16.0
                "request_rate_per_second": 4.0,
                "queue_depth_requests": 7.0,
                "token_throughput_per_second": 600.0,  # nv_llm_output_token_len_sum +6 000
                "kv_cache_utilization_ratio": 0.91,
            },
            {
                "requests_running": 52.0,
                "failed_requests_per_second": 0.0,
                "request_latency_mean_seconds": 2.4,  # tensorrt_llm's +96 000 000 µs over its 40
                "queue_time_mean_seconds": 0.0002,
            },
            id="triton tensorrt-llm ensemble",
        ),
        pytest.param(
            "llamacpp",
            "llamacpp",
            {"queue_depth_requests": 3.0, "token_throughput_per_second": 400.0},  # tokens_predicted +4 000
            {"requests_running": 4.0, "prompt_tokens_per_second": 1500.0, "decode_calls_per_second": 400.0},
            id="llama.cpp",
        ),
    ],
)
def test_two_scrapes_give_the_known_truth(
    kind: str, prefix: str, metrics: dict[str, float], extra: dict[str, float]
) -> None:
    _, readings = probe_after(kind, [f"{prefix}_scrape_1", f"{prefix}_scrape_2"])
    reading = readings[-1]
    assert reading.error is None
    assert reading.metrics == pytest.approx(metrics, rel=1e-12)
    assert reading.extra == pytest.approx(extra, rel=1e-12)


def test_the_fixtures_hold_the_miscounts_the_adapters_avoid() -> None:
    """The naive counters really are off in the texts, so the truths above test the choice of counter."""

    def increase(name: str, family: str, suffix: str = "_total") -> float:
        before, after = (samples(parse_families(fixture(f"{name}_scrape_{i}")), family, suffix) for i in (1, 2))
        assert before is not None and after is not None
        return sum(after.values()) - sum(before.values())

    assert increase("tgi_chat", "tgi_request_count") == 72.0  # 2 × 36
    assert increase("triton_trtllm", "nv_inference_request_success") == 160.0  # 4 models × 40
    waiting = samples(parse_families(fixture("sglang_scrape_2")), "sglang:num_queue_reqs")
    assert waiting is not None and sum(waiting.values()) == 20.0


@pytest.mark.parametrize(
    ("kind", "names", "absent"),
    [
        pytest.param(
            "tgi",
            ["tgi_scrape_1"],
            {
                "kv_cache_utilization_ratio": "tgi exposes no KV-cache metric",
                "request_rate_per_second": "needs a second scrape",
                "token_throughput_per_second": "needs a second scrape",
                "request_latency_p99_seconds": "needs a second scrape",
            },
            id="tgi first scrape",
        ),
        pytest.param(
            "llamacpp",
            ["llamacpp_scrape_1", "llamacpp_scrape_2"],
            {
                "request_rate_per_second": "llamacpp counts tokens, not requests",
                "request_latency_p99_seconds": "llamacpp exposes no latency histogram",
                "kv_cache_utilization_ratio": "llamacpp:kv_cache_usage_ratio is not exposed",
            },
            id="llama.cpp",
        ),
        pytest.param(
            "triton",
            ["triton_trtllm_scrape_1", "triton_trtllm_scrape_2"],
            {"request_latency_p99_seconds": "nv_inference_request_summary_us is not exposed"},
            id="triton without summary latencies",
        ),
        pytest.param(
            "triton",
            ["triton_scrape_1", "triton_scrape_2"],
            {
                "token_throughput_per_second": "nv_llm_output_token_len_sum is not exposed",
                "kv_cache_utilization_ratio": "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction} "
                "is not exposed",
            },
            id="triton without tensorrt-llm",
        ),
        # the same text twice: no request finished, so the rate is a measured 0 and the p99 has nothing to rank
        pytest.param(
            "vllm",
            ["vllm_scrape_1", "vllm_scrape_1"],
            {"request_latency_p99_seconds": "no request finished in the window"},
            id="vllm idle window",
        ),
        pytest.param("vllm", ["vllm_dp_scrape_1", "vllm_dp_scrape_2"], {}, id="vllm all present"),
    ],
)
def test_absent_metrics_say_why(kind: str, names: list[str], absent: dict[str, str]) -> None:
    probe, readings = probe_after(kind, names)
    assert probe.absent() == absent
    assert set(absent).isdisjoint(readings[-1].metrics)
    assert set(absent) | set(readings[-1].metrics) == POOL_METRICS


def test_a_failed_scrape_makes_every_metric_absent_for_that_reason() -> None:
    probe = EngineScrapeProbe("tgi", URL, "chat", fetch=ReplayFetch([ScrapeFailed("timed out after 2 s")]))
    assert probe.absent() == {}
    probe.read()
    assert probe.absent() == {
        **dict.fromkeys(POOL_METRICS, "scrape failed"),
        "kv_cache_utilization_ratio": "tgi exposes no KV-cache metric",
    }


def test_a_value_outside_the_catalog_range_is_absent_for_that_reason() -> None:
    text = '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 1.5\n'
    probe = EngineScrapeProbe("vllm", URL, "chat", fetch=ReplayFetch([text]))
    [reading] = probe.read()
    assert probe.absent()["kv_cache_utilization_ratio"] == "outside its catalog range"
    assert reading.error == "kv_cache_utilization_ratio=1.5 is outside its range 0..1"


def test_every_engine_maps_or_explains_each_pool_metric() -> None:
    assert {k.value for k in EngineKind} == {"vllm", "sglang", "tgi", "triton", "llamacpp"}
    for kind, mapping in MAPPINGS.items():
        assert set(mapping.metrics) | set(mapping.unexposed) == POOL_METRICS, kind
        assert not set(mapping.metrics) & set(mapping.unexposed), kind


def test_the_agent_serves_absences_at_scrape_time() -> None:
    registry = CollectorRegistry()
    telemetry = AgentTelemetry(registry)
    probe, _ = probe_after("llamacpp", ["llamacpp_scrape_1"])
    telemetry.watch_engine(probe)
    telemetry.watch_engine(probe)  # once is enough
    text = generate_latest(registry).decode()
    labels = f'endpoint="{URL}",engine="llamacpp",metric="request_rate_per_second",pool="chat"'
    line = f'fleetpilot_agent_engine_metric_absent{{{labels},reason="llamacpp counts tokens, not requests"}} 1.0'
    assert line in text.splitlines()
    assert text.count('reason="needs a second scrape"') == 1  # tokens/s
    telemetry.unwatch_engine(probe)
    assert 'metric="' not in generate_latest(registry).decode()


A0: LabelSet = frozenset({("dp_rank", "0"), ("tp_rank", "0")})
A1: LabelSet = frozenset({("dp_rank", "0"), ("tp_rank", "1")})
B0: LabelSet = frozenset({("dp_rank", "1"), ("tp_rank", "0")})


@pytest.mark.parametrize(
    ("series", "combine", "collapse", "expected"),
    [
        ({A0: 3.0, A1: 3.0, B0: 2.0}, math.fsum, frozenset({"tp_rank"}), 5.0),  # one per dp engine, summed
        ({A0: 3.0, A1: 3.0, B0: 2.0}, math.fsum, frozenset(), 8.0),
        ({A0: 0.5, A1: 0.7, B0: 0.9}, max, frozenset({"tp_rank"}), 0.9),
        ({A0: 1.0, A1: 4.0}, math.fsum, frozenset({"tp_rank"}), 4.0),  # copies that disagree: the larger
    ],
)
def test_collapsing_rank_labels(series: Series, combine: Combine, collapse: frozenset[str], expected: float) -> None:
    assert combine_series(series, combine, collapse) == expected


@pytest.mark.parametrize(
    ("labels", "where", "expected"),
    [
        (frozenset({("model", "b"), ("version", "1")}), selector(model="b"), True),
        (frozenset({("model", "c")}), frozenset({("model", "a"), ("model", "b")}), False),
        (frozenset({("model", "a")}), frozenset({("model", "a"), ("model", "b")}), True),  # one of the names' values
        (frozenset({("model", "a")}), selector(model="a", request_type="waiting"), False),  # every name must match
        (frozenset({("model", "a")}), frozenset(), True),
    ],
)
def test_label_selectors(labels: LabelSet, where: LabelSet, expected: bool) -> None:
    assert matches(labels, where) is expected


@pytest.mark.parametrize(
    "names",
    [
        ["vllm_dp_scrape_1", "vllm_dp_scrape_2"],
        ["sglang_scrape_1", "sglang_scrape_2"],
        ["tgi_chat_scrape_1", "tgi_chat_scrape_2"],
        ["triton_trtllm_scrape_1", "triton_trtllm_scrape_2"],
        ["llamacpp_scrape_1", "llamacpp_scrape_2"],
    ],
)
def test_readings_pass_the_collectors_ingest_validation(names: list[str]) -> None:
    kind = names[0].split("_")[0]
    _, readings = probe_after(kind, names)
    body = {
        "node_id": "node-a",
        "samples": [{"seq": i, **wire_sample(r, ts=1_764_424_800.0 + i)} for i, r in enumerate(readings, start=1)],
    }
    batch = parse_batch(
        json.dumps(body).encode(), now=1_764_424_900.0, max_samples=100, max_future_seconds=300, max_replicas=256
    )
    assert len(batch.samples) == len(names)
