"""The fixture exporter's texts are what a Prometheus parser reads back as the values given, in the upstream formats.

``promtool check metrics`` may only complain about what the real exporters also emit: dcgm-exporter's camelCase
labels (``modelName``) and its counter without ``_total``, vLLM's colons in metric names.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.support.fixture_exporter import (
    VLLM_REQUEST_LATENCY_BUCKETS_S,
    DcgmGpu,
    FixtureExporter,
    NetDevice,
    VllmEngine,
    go_float,
    render_dcgm,
    render_node_netdev,
    render_vllm,
)
from tests.support.prometheus import promtool_check_metrics

VLLM_FIXTURE = Path(__file__).resolve().parents[2] / "inference_agent/probes/fixtures/engines/vllm_scrape_1.prom"
H100 = DcgmGpu(
    gpu=1,
    uuid="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
    gpu_util_percent=87,
    mem_copy_util_percent=41,
    fb_used_mib=61440,
    fb_free_mib=20119,
    power_usage_w=312.25,
    gpu_temp_c=64,
    sm_clock_mhz=1755,
    total_energy_mj=9_876_543_210,
    pod="vllm-0",
    namespace="inference",
    container="vllm",
)
# cumulative: 2 at ≤ 0.3 s ... 40 at ≤ 10 s, 42 finished
E2E_BUCKETS = (2, 5, 9, 14, 20, 26, 30, 36, 40, *([42] * 12))
ENGINE = VllmEngine(
    num_requests_running=16,
    num_requests_waiting=5,
    kv_cache_usage_perc=0.5375,
    generation_tokens_total=361_095,
    request_success_total={"stop": 2218, "length": 208, "abort": 16},
    e2e_latency_buckets=E2E_BUCKETS,
    e2e_latency_count=42,
    e2e_latency_sum_s=97.5,
)
# what promtool's linter says of the real exporters' own output
UPSTREAM_LINT = re.compile(
    r"(DCGM_FI_\w+ label names should be written in 'snake_case' not 'camelCase'"
    r'|DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter metrics should have "_total" suffix'
    r"|vllm:\w+ metric names should not contain ':')"
)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    parsed: list[Sample] = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    return {(sample.name, frozenset(sample.labels.items())): sample.value for sample in parsed}


def test_dcgm_text_carries_each_reading_with_dcgm_exporters_labels() -> None:
    parsed = samples(render_dcgm([H100]))
    labels = frozenset(
        {
            "gpu": "1",
            "UUID": H100.uuid,
            "device": "nvidia1",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "gpu-node-a",
            "DCGM_FI_DRIVER_VERSION": "550.90.07",
            "pod": "vllm-0",
            "namespace": "inference",
            "container": "vllm",
        }.items()
    )
    assert parsed == {
        ("DCGM_FI_DEV_SM_CLOCK", labels): 1755,
        ("DCGM_FI_DEV_GPU_TEMP", labels): 64,
        ("DCGM_FI_DEV_POWER_USAGE", labels): 312.25,
        # prometheus_client's parser names a counter's sample ``_total`` even where the text has none; Prometheus
        # keeps the name as written (tests/collector/test_prometheus_remote_harness.py)
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", labels): 9_876_543_210,
        ("DCGM_FI_DEV_GPU_UTIL", labels): 87,
        ("DCGM_FI_DEV_MEM_COPY_UTIL", labels): 41,
        ("DCGM_FI_DEV_FB_FREE", labels): 20119,
        ("DCGM_FI_DEV_FB_USED", labels): 61440,
    }


def test_dcgm_text_without_kubernetes_mapping_has_no_pod_labels() -> None:
    line = next(
        line for line in render_dcgm([DcgmGpu(0, "GPU-0")]).splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL")
    )
    assert line == (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="gpu-node-a",DCGM_FI_DRIVER_VERSION="550.90.07"} 0'
    )


def test_dcgm_types_follow_default_counters_csv() -> None:
    types = {family.name: family.type for family in text_string_to_metric_families(render_dcgm([H100]))}
    assert types.pop("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == "counter"
    assert set(types.values()) == {"gauge"}


def test_vllm_text_carries_gauges_counters_and_the_e2e_histogram() -> None:
    parsed = samples(render_vllm([ENGINE]))
    key = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}

    def at(name: str, **extra: str) -> float:
        return parsed[(name, frozenset((key | extra).items()))]

    assert at("vllm:num_requests_running") == 16
    assert at("vllm:num_requests_waiting") == 5
    assert at("vllm:kv_cache_usage_perc") == 0.5375
    assert at("vllm:generation_tokens_total") == 361_095
    assert {reason: at("vllm:request_success_total", finished_reason=reason) for reason in ("stop", "length")} == {
        "stop": 2218,
        "length": 208,
    }
    buckets = [at("vllm:e2e_request_latency_seconds_bucket", le=str(bound)) for bound in VLLM_REQUEST_LATENCY_BUCKETS_S]
    assert buckets == list(E2E_BUCKETS)
    assert at("vllm:e2e_request_latency_seconds_bucket", le="+Inf") == 42
    assert at("vllm:e2e_request_latency_seconds_count") == 42
    assert at("vllm:e2e_request_latency_seconds_sum") == 97.5


def test_vllm_buckets_are_the_ones_of_the_checked_in_vllm_fixture() -> None:
    bounds = re.findall(r'vllm:e2e_request_latency_seconds_bucket\{engine="0",le="([^"]+)"', VLLM_FIXTURE.read_text())
    assert [float(bound) for bound in bounds if bound != "+Inf"] == list(VLLM_REQUEST_LATENCY_BUCKETS_S)


@pytest.mark.parametrize(
    ("buckets", "count"),
    [((1, 0, *([0] * 19)), 1), (E2E_BUCKETS, 41), (E2E_BUCKETS[:-1], 42)],
    ids=["decreasing", "inf-below-last-bucket", "one-bucket-short"],
)
def test_vllm_engine_refuses_buckets_that_are_not_cumulative(buckets: tuple[int, ...], count: int) -> None:
    with pytest.raises(ValueError, match="bucket"):
        VllmEngine(e2e_latency_buckets=buckets, e2e_latency_count=count)


def test_node_netdev_text_carries_byte_counters_per_device() -> None:
    text = render_node_netdev([NetDevice("eth0", 1_234_000, 98_765), NetDevice("bond0", 7, 0)])
    assert samples(text) == {
        ("node_network_receive_bytes_total", frozenset({("device", "bond0")})): 7,
        ("node_network_receive_bytes_total", frozenset({("device", "eth0")})): 1_234_000,
        ("node_network_transmit_bytes_total", frozenset({("device", "bond0")})): 0,
        ("node_network_transmit_bytes_total", frozenset({("device", "eth0")})): 98_765,
    }
    assert 'node_network_receive_bytes_total{device="eth0"} 1.234e+06' in text.splitlines()


@pytest.mark.parametrize(
    ("value", "go"),
    [(0, "0"), (7, "7"), (999_999, "999999"), (1e6, "1e+06"), (1_234_000, "1.234e+06"), (0.5, "0.5"), (1e-5, "1e-05")],
)
def test_go_float_writes_what_strconv_format_float_g_writes(value: float, go: str) -> None:
    assert go_float(value) == go


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "text",
    [render_dcgm([H100]), render_vllm([ENGINE]), render_node_netdev([NetDevice("eth0", 1, 2)])],
    ids=["dcgm", "vllm", "node"],
)
def test_promtool_finds_nothing_upstream_does_not_also_emit(text: str) -> None:
    verdict = promtool_check_metrics(text.encode())
    unexpected = [line for line in verdict.output.splitlines() if not UPSTREAM_LINT.fullmatch(line)]
    assert not unexpected, verdict.output


def test_exporter_serves_the_text_last_given_and_counts_scrapes() -> None:
    with FixtureExporter(render_node_netdev([NetDevice("eth0", 100, 0)])) as exporter:
        first = httpx.get(f"{exporter.url}/metrics", timeout=5.0)
        exporter.serve(render_node_netdev([NetDevice("eth0", 250, 0)]))
        second = httpx.get(f"{exporter.url}/metrics", timeout=5.0)
        missing = httpx.get(f"{exporter.url}/other", timeout=5.0)
        assert exporter.scrapes == 2
    assert first.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    receive = ("node_network_receive_bytes_total", frozenset({("device", "eth0")}))
    assert (samples(first.text)[receive], samples(second.text)[receive]) == (100, 250)
    assert missing.status_code == 404
