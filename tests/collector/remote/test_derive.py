"""Staging and derivation, pure: which points are kept, which scrapes a rate and a p99 read, and the families the
agent's signals see."""

from __future__ import annotations

import math
import struct

import pytest

from collector.remote.derive import SeriesInfo, derive_at, families, interval_at, memory_total_at
from collector.remote.mapping import load_mapping
from collector.remote.series import RemoteSeries
from collector.remote.staging import Dropped, Placements, group_id, series_id, stage
from wire.scrape.engines import TGI, VLLM

STALE_NAN = struct.unpack(">d", struct.pack(">Q", 0x7FF0000000000002))[0]
NOW = 1_764_424_800.0


@pytest.mark.parametrize(
    ("times", "at", "previous", "window"),
    [
        ([0, 15, 30], 30, 15, 15),  # scrapes longer than the 10 s window: both read the scrape before
        ([0, 5, 10, 15], 15, 10, 5),  # 5 s scrapes: the rate over 5 s, the p99 over the 10 s window
        ([0, 15], 0, None, None),  # the first scrape: neither
        ([0, 200, 215], 200, None, None),  # after a gap over max_gap_seconds (150): the past is forgotten
        ([0, 200, 215], 215, 200, 200),
    ],
)
def test_interval_at_reads_the_scrapes_the_agent_would_have_kept(
    times: list[float], at: float, previous: float | None, window: float | None
) -> None:
    assert interval_at(at, times, max_gap_seconds=150.0) == (previous, window)


def test_a_series_named_like_its_family_serves_as_a_gauge_and_as_a_counter() -> None:
    """TGI's router writes counters without _total (tgi_request_success): a Rate reads it, as from its exposition."""
    info = {1: SeriesInfo("tgi_request_success", "tgi_request_success", {})}
    scrapes = {0.0: families([(1, 100.0)], info), 10.0: families([(1, 150.0)], info)}
    derived, resolution = derive_at(TGI, 10.0, scrapes, [0.0, 10.0], max_gap_seconds=150.0)
    assert derived.metrics["request_rate_per_second"] == pytest.approx(5.0)
    assert resolution == 10.0


def test_vllm_p99_and_rates_over_two_scrapes_15_s_apart() -> None:
    name = "vllm:e2e_request_latency_seconds"
    bounds = ["0.5", "1.0", "2.5", "+Inf"]
    info = {i: SeriesInfo(name, f"{name}_bucket", {"le": le, "model_name": "m"}) for i, le in enumerate(bounds)}
    info[9] = SeriesInfo(name, f"{name}_count", {"model_name": "m"})
    info[10] = SeriesInfo("vllm:generation_tokens", "vllm:generation_tokens_total", {"model_name": "m"})
    before = [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0), (9, 0.0), (10, 1000.0)]
    after = [(0, 36.0), (1, 42.0), (2, 42.0), (3, 42.0), (9, 42.0), (10, 7000.0)]
    scrapes = {0.0: families(before, info), 15.0: families(after, info)}
    derived, _ = derive_at(VLLM, 15.0, scrapes, [0.0, 15.0], max_gap_seconds=150.0)
    # rank 41.58 of 42 lies in (0.5, 1.0] holding 6, 5.58 of them below it → 0.5 + 0.5 × 5.58 / 6
    assert derived.metrics["request_latency_p99_seconds"] == pytest.approx(0.965)
    assert derived.metrics["request_rate_per_second"] == pytest.approx(42 / 15)
    assert derived.metrics["token_throughput_per_second"] == pytest.approx(400.0)


def test_a_restarted_engines_counters_count_from_zero() -> None:
    info = {1: SeriesInfo("vllm:generation_tokens", "vllm:generation_tokens_total", {})}
    scrapes = {0.0: families([(1, 90_000.0)], info), 15.0: families([(1, 300.0)], info)}
    derived, _ = derive_at(VLLM, 15.0, scrapes, [0.0, 15.0], max_gap_seconds=150.0)
    assert derived.metrics["token_throughput_per_second"] == pytest.approx(20.0)


def test_stage_keeps_mapped_points_and_counts_every_other_one_by_reason() -> None:
    gpu = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "a"}
    series = [
        RemoteSeries(
            gpu, ((NOW - 30, 50.0), (NOW - 15, STALE_NAN), (NOW, math.nan), (NOW - 700, 1.0), (NOW + 400, 1.0))
        ),
        RemoteSeries({"__name__": "go_goroutines", "instance": "a:1"}, ((NOW, 5.0), (NOW - 15, 5.0))),
        RemoteSeries({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0"}, ((NOW, 60.0),)),
    ]
    placements = Placements(load_mapping(), max_label_bytes=2048)
    staged = stage(series, placements, now=NOW, oldest=NOW - 600, max_future_seconds=300)
    assert [(s.name, s.points) for s in staged.series] == [("DCGM_FI_DEV_GPU_UTIL", ((NOW - 30, 50.0),))]
    assert dict(staged.dropped) == {
        Dropped.STALE_MARKER: 1,
        Dropped.NOT_FINITE: 1,
        Dropped.TOO_OLD: 1,
        Dropped.TOO_NEW: 1,
        Dropped.UNMAPPED: 2,
        Dropped.NO_NODE: 1,
    }
    kept = staged.series[0]
    assert kept.labels == {"gpu": "0", "Hostname": "a"} and kept.family == "DCGM_FI_DEV_GPU_UTIL"
    assert kept.group_id == group_id(kept.place)


def test_ids_are_stable_and_ignore_label_order() -> None:
    a = series_id({"__name__": "x", "a": "1", "b": "2"})
    assert a == series_id({"b": "2", "__name__": "x", "a": "1"})
    assert a != series_id({"__name__": "x", "a": "1", "b": "3"})
    assert a == 253988670570489676  # the same in every process and release: blake2b, not hash()
    assert -(2**63) <= a < 2**63


@pytest.mark.parametrize(
    ("mib", "total_mib"),
    [
        ({"DCGM_FI_DEV_FB_USED": 40960, "DCGM_FI_DEV_FB_FREE": 40448, "DCGM_FI_DEV_FB_RESERVED": 512}, 81920),
        ({"DCGM_FI_DEV_FB_USED": 40960, "DCGM_FI_DEV_FB_FREE": 40448}, 81408),  # dcgm-exporter 3.3: no reserved
        ({"DCGM_FI_DEV_FB_USED": 40960}, None),  # free not sent: the size is not known
        ({"DCGM_FI_DEV_FB_FREE": 40448, "DCGM_FI_DEV_FB_RESERVED": 512}, None),
        ({"DCGM_FI_DEV_FB_USED": 1.0, "DCGM_FI_DEV_FB_FREE": 9e15}, None),  # past a BIGINT in bytes: not a size
    ],
)
def test_a_dcgm_gpus_memory_size_is_used_plus_free_plus_reserved(mib: dict[str, float], total_mib: int | None) -> None:
    source = load_mapping().by_name["dcgm-exporter"]
    assert source.memory_total is not None
    info = {i: SeriesInfo(name, name, {"gpu": "0"}) for i, name in enumerate(mib)}
    scrape = families([(i, value) for i, value in enumerate(mib.values())], info)
    found = memory_total_at(source.memory_total, NOW, scrape)
    assert found == (None if total_mib is None else total_mib * 1048576)
