"""Engine probes on written vLLM, TGI and Triton texts: rates, p99, absences, failures and gaps, with a fake clock.

The adapters for the other engines and deployments (SGLang, llama.cpp, vLLM data parallel, Triton with TensorRT-LLM,
TGI chat traffic) are in ``test_engine_adapters.py``.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import httpx
import pytest

from inference_agent.probes.base import Reading
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.probes.exposition_fetch import HttpFetch, ReplayFetch, ScrapeFailed
from inference_agent.sampler import wire_sample
from tests.support.clock import FakeClock
from wire.catalog import METRICS, Scope
from wire.samples import parse_batch
from wire.scrape.arithmetic import parse_families
from wire.scrape.engines import MAPPINGS, EngineKind
from wire.scrape.signals import Scrape, ScrapeHistory

URL = "http://10.0.0.7:8000/metrics"
STEP_S = 10.0


def fixture(name: str) -> str:
    return files("inference_agent.probes").joinpath("fixtures", "engines", f"{name}.prom").read_text()


def without(text: str, family: str) -> str:
    """``text`` as a server that does not expose ``family`` would serve it (Triton without summary latencies)."""
    return "".join(line for line in text.splitlines(keepends=True) if family not in line)


def readings(kind: str, responses: list[str | Exception], **options: Any) -> list[Reading]:
    """One reading per response, the scrapes ``STEP_S`` apart."""
    clock = FakeClock(now=100.0)
    probe = EngineScrapeProbe(kind, URL, "llama-8b", fetch=ReplayFetch(responses), clock=clock, **options)
    out = []
    for _ in responses:
        [reading] = probe.read()
        out.append(reading)
        clock.advance(STEP_S)
    return out


@pytest.mark.parametrize(
    ("kind", "first", "metrics", "extra"),
    [
        pytest.param(
            "vllm",
            "vllm_scrape_1",
            {"queue_depth_requests": 3.0, "kv_cache_utilization_ratio": 0.4125},
            {"requests_running": 14.0, "data_parallel_engines": 1.0, "queue_depth_fullest_engine_requests": 3.0},
            id="vllm",
        ),
        pytest.param(
            "vllm",
            "vllm_v0_scrape_1",
            {"queue_depth_requests": 2.0, "kv_cache_utilization_ratio": 0.6231},
            {"requests_running": 9.0, "data_parallel_engines": 1.0, "queue_depth_fullest_engine_requests": 2.0},
            id="vllm 0.6: KV cache under its old name gpu_cache_usage_perc",
        ),
        pytest.param("tgi", "tgi_scrape_1", {"queue_depth_requests": 2.0}, {"requests_running": 12.0}, id="tgi"),
        # Triton's summary quantile is its own sliding window, a gauge in effect: present at once (max of two models)
        pytest.param(
            "triton",
            "triton_scrape_1",
            {"queue_depth_requests": 4.0, "request_latency_p99_seconds": 3.412},
            {},
            id="triton",
        ),
    ],
)
def test_first_scrape_has_gauges_only(
    kind: str, first: str, metrics: dict[str, float], extra: dict[str, float]
) -> None:
    [reading] = readings(kind, [fixture(first)])
    assert reading == Reading(metrics=metrics, pool="llama-8b", extra=extra)


@pytest.mark.parametrize(
    ("kind", "scrapes", "metrics", "extra"),
    [
        pytest.param(
            "vllm",
            ["vllm_scrape_1", "vllm_scrape_2"],
            {
                "request_rate_per_second": 4.2,  # e2e count 2 400 → 2 442 in 10 s
                "queue_depth_requests": 5.0,
                "token_throughput_per_second": 421.5,  # 356 880 → 361 095
                "request_latency_p99_seconds": 9.65,  # 5 + 5 × (41.58 − 36) / 6
                "kv_cache_utilization_ratio": 0.5375,
            },
            {
                "requests_running": 16.0,
                "prompt_tokens_per_second": 2187.0,
                "time_to_first_token_p99_seconds": 0.6375,  # 0.5 + 0.25 × 0.55
                "preemptions_per_second": 0.2,
                "data_parallel_engines": 1.0,
                "queue_depth_fullest_engine_requests": 5.0,
            },
            id="vllm",
        ),
        pytest.param(
            "vllm",
            ["vllm_scrape_1", "vllm_scrape_2", "vllm_restarted"],
            {
                "request_rate_per_second": 0.6,  # 2 442 → 6: restarted, the 6 since
                "queue_depth_requests": 0.0,
                "token_throughput_per_second": 131.0,
                "request_latency_p99_seconds": 2.47,  # the new buckets alone: 2 + 0.5 × 0.94
                "kv_cache_utilization_ratio": 0.0875,
            },
            {
                "requests_running": 6.0,
                "prompt_tokens_per_second": 501.2,
                "time_to_first_token_p99_seconds": 0.47,
                "preemptions_per_second": 0.0,  # 5 → 0: restarted, none since; a measured zero
                "data_parallel_engines": 1.0,
                "queue_depth_fullest_engine_requests": 0.0,
            },
            id="vllm restarted between scrapes",
        ),
        pytest.param(
            "tgi",
            ["tgi_scrape_1", "tgi_scrape_2"],
            {
                # 34 successes + 2 failures; tgi_request_count (+38) counted arrivals, and a chat request twice
                "request_rate_per_second": 3.6,
                "queue_depth_requests": 4.0,
                "token_throughput_per_second": 935.4,  # generated-tokens sum 1 402 114 → 1 411 468
                # 34 new requests: rank 33.66 between bounds 0.0001 × 1.5^27 and × 1.5^28
                "request_latency_p99_seconds": 7.556412111992161,
            },
            {
                "requests_running": 15.0,
                "failed_requests_per_second": 0.2,  # tgi_request_failure appears with 2: counted from 0
                "queue_time_p99_seconds": 0.2948394300670619,
            },
            id="tgi: no KV cache",
        ),
        pytest.param(
            "triton",
            ["triton_scrape_1", "triton_scrape_2"],
            {
                "request_rate_per_second": 120.1,  # (1 180 + 20 successes + 1 failure) / 10 s
                "queue_depth_requests": 6.0,
                "request_latency_p99_seconds": 3.388,
            },
            {
                "failed_requests_per_second": 0.1,
                "request_latency_mean_seconds": 0.039245,  # 47 094 000 µs / 1 200
                "queue_time_mean_seconds": 0.001295,  # 1 554 000 µs / 1 200
                "time_to_first_response_p99_seconds": 4.4,  # 2 000 + 3 000 × 0.8 ms
            },
            id="triton: no tokens, no KV cache",
        ),
    ],
)
def test_later_scrapes_derive_rates_and_p99(
    kind: str, scrapes: list[str], metrics: dict[str, float], extra: dict[str, float]
) -> None:
    reading = readings(kind, [fixture(name) for name in scrapes])[-1]
    assert reading.error is None
    assert reading.metrics == pytest.approx(metrics, rel=1e-12)
    assert reading.extra == pytest.approx(extra, rel=1e-12)


def test_triton_without_summaries_has_no_p99_but_its_mean_latency() -> None:
    texts = [
        without(fixture(name), "nv_inference_request_summary_us") for name in ("triton_scrape_1", "triton_scrape_2")
    ]
    reading = readings("triton", list(texts))[-1]
    assert "request_latency_p99_seconds" not in reading.metrics
    assert reading.extra["request_latency_mean_seconds"] == pytest.approx(0.039245)


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (ScrapeFailed("ConnectError: [Errno 111] Connection refused"), "Connection refused"),
        ('vllm:num_requests_waiting{engine="0" 3\n', "not Prometheus text"),
        # lines of families the mapping does not read are dropped unparsed, so a page of HTML reads as none of them
        ("<html><body>502 Bad Gateway</body></html>", "none of the vllm metrics"),
        ("", "none of the vllm metrics"),
        (fixture("tgi_scrape_1"), "none of the vllm metrics"),
    ],
)
def test_a_failed_scrape_is_an_error_without_metrics(response: str | Exception, why: str) -> None:
    [reading] = readings("vllm", [response])
    assert (reading.metrics, reading.extra, reading.pool) == ({}, {}, "llama-8b")
    assert reading.error is not None
    assert f"vllm scrape of {URL} failed" in reading.error
    assert why in reading.error


@pytest.mark.parametrize(
    ("outage_s", "request_rate"),
    [
        # scrape, failure, scrape 20 s after the first: the baseline held across the failure → 42 / 20 s
        (20.0, 2.1),
        # 40 s is over the 30 s max gap: no rate across it, rather than an average that hides the outage
        (40.0, None),
    ],
)
def test_a_gap_longer_than_max_gap_resets_the_baseline(outage_s: float, request_rate: float | None) -> None:
    clock = FakeClock(now=0.0)
    replay = ReplayFetch([fixture("vllm_scrape_1"), ScrapeFailed("timed out after 2 s"), fixture("vllm_scrape_2")])
    probe = EngineScrapeProbe("vllm", URL, "llama-8b", fetch=replay, clock=clock, max_gap_s=30.0)
    probe.read()
    clock.advance(10.0)
    [failed] = probe.read()
    clock.advance(outage_s - 10.0)
    [reading] = probe.read()
    assert failed.metrics == {}
    assert reading.metrics.get("request_rate_per_second") == request_rate
    assert reading.metrics["queue_depth_requests"] == 5.0
    assert ("request_latency_p99_seconds" in reading.metrics) is (request_rate is not None)


@pytest.mark.parametrize(
    ("times", "previous", "window_start"),
    [
        ([0.0], None, None),
        ([0.0, 5.0], 0.0, 0.0),
        # window 10 s: at 15 the scrape at 0 has left it; rates use the last interval only
        ([0.0, 5.0, 10.0, 15.0], 10.0, 5.0),
        # scrapes sparser than the window but within the gap: both span the last interval
        ([0.0, 25.0], 0.0, 0.0),
        ([0.0, 31.0], None, None),
        # a clock that did not move forward starts over
        ([0.0, 0.0], None, None),
    ],
)
def test_scrape_history_window(times: list[float], previous: float | None, window_start: float | None) -> None:
    history = ScrapeHistory(window_s=10.0, max_gap_s=30.0)
    interval = [history.add(Scrape(t, {})) for t in times][-1]
    assert (interval.previous.at_s if interval.previous else None) == previous
    assert (interval.window_start.at_s if interval.window_start else None) == window_start


def test_a_value_outside_the_catalog_range_is_dropped_and_named() -> None:
    text = (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 1.5\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2\n'
    )
    [reading] = readings("vllm", [text])
    assert reading.metrics == {"queue_depth_requests": 2.0}
    assert reading.error == "kv_cache_utilization_ratio=1.5 is outside its range 0..1"


def _http_probe(transport: httpx.MockTransport) -> EngineScrapeProbe:
    return EngineScrapeProbe("tgi", URL, "llama-8b", fetch=HttpFetch(timeout_s=0.5, transport=transport))


def _answer(request: httpx.Request) -> httpx.Response:
    assert request.headers["accept"].startswith("text/plain;version=0.0.4")
    return httpx.Response(200, text=fixture("tgi_scrape_1"))


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def _time_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


@pytest.mark.parametrize(
    ("handler", "metrics", "why"),
    [
        (_answer, {"queue_depth_requests": 2.0}, None),
        (lambda request: httpx.Response(503, text="loading"), {}, "answered 503 Service Unavailable"),
        (lambda request: httpx.Response(404), {}, "answered 404 Not Found"),
        (_refuse, {}, "ConnectError: [Errno 111] Connection refused"),
        (_time_out, {}, "timed out after 0.5 s"),
    ],
)
def test_http_fetch_translates_failures(handler: Any, metrics: dict[str, float], why: str | None) -> None:
    probe = _http_probe(httpx.MockTransport(handler))
    [reading] = probe.read()
    probe.close()
    assert reading.metrics == metrics
    assert reading.error == (None if why is None else f"tgi scrape of {URL} failed: {why}")


def test_the_default_fetch_is_http_and_closes() -> None:
    probe = EngineScrapeProbe("triton", "http://127.0.0.1:9/metrics", "resnet")
    assert probe.name == "engine-triton"
    probe.close()


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="ollama"):
        EngineScrapeProbe("ollama", URL, "llama-8b", fetch=ReplayFetch([]))


@pytest.mark.parametrize("kind", list(EngineKind))
def test_dropping_unread_lines_before_parsing_changes_nothing(kind: str) -> None:
    wanted = MAPPINGS[EngineKind(kind)].families()
    for path in files("inference_agent.probes").joinpath("fixtures", "engines").iterdir():
        if path.name.startswith(kind):
            everything = parse_families(path.read_text())
            assert parse_families(path.read_text(), wanted) == {k: v for k, v in everything.items() if k in wanted}


def test_mappings_name_only_pool_replica_metrics_of_the_catalog() -> None:
    pool_metrics = {m.name for m in METRICS if m.scope is Scope.POOL_REPLICA}
    for mapping in MAPPINGS.values():
        assert set(mapping.metrics) <= pool_metrics
        assert not set(mapping.extra) & {m.name for m in METRICS}


@pytest.mark.parametrize(
    ("kind", "scrapes"),
    [
        ("vllm", ["vllm_scrape_1", "vllm_scrape_2", "vllm_restarted"]),
        ("tgi", ["tgi_scrape_1", "tgi_scrape_2"]),
        ("triton", ["triton_scrape_1", "triton_scrape_2"]),
    ],
)
def test_readings_pass_the_collectors_ingest_validation(kind: str, scrapes: list[str]) -> None:
    samples = [
        {"seq": seq, **wire_sample(reading, ts=1_764_424_800.0 + seq)}
        for seq, reading in enumerate(readings(kind, [fixture(name) for name in scrapes]), start=1)
    ]
    body = json.dumps({"node_id": "node-a", "samples": samples}).encode()
    batch = parse_batch(body, now=1_764_424_900.0, max_samples=100, max_future_seconds=300, max_replicas=256)
    assert len(batch.samples) == len(scrapes)
