"""The sampler: readings become spooled wire samples, errors travel and are counted, slow probes stay off the tick."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from inference_agent.probes.base import GpuInfo, Reading
from inference_agent.sampler import BackgroundProbe, Sampler, with_network_latency
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry
from wire.samples import parse_batch


class TwoGpus:
    name = "two-gpus"

    def inventory(self) -> list[GpuInfo]:
        return [GpuInfo(0), GpuInfo(1)]

    def read(self) -> list[Reading]:
        return [
            Reading({"gpu_utilization_ratio": 0.7, "gpu_power_watts": 350.0}, device=0),
            Reading({}, device=1, error="nvmlDeviceGetHandleByIndex: GPU is lost"),
        ]

    def close(self) -> None:
        pass


class Host:
    name = "host"

    def read(self) -> list[Reading]:
        return [Reading({"network_throughput_bytes_per_second": 1e6}, extra={"host_cpu_ratio": 0.2})]

    def close(self) -> None:
        pass


class Slow:
    name = "slow-engine"

    def __init__(self) -> None:
        self.calls = 0

    def read(self) -> list[Reading]:
        self.calls += 1
        time.sleep(0.3)
        return [Reading({"queue_depth_requests": 4.0}, pool="llama-8b")]

    def close(self) -> None:
        pass


def test_one_tick_spools_wire_samples_the_collector_accepts(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    telemetry = AgentTelemetry(CollectorRegistry())
    sampler = Sampler(
        spool,
        telemetry,
        gpu=TwoGpus(),
        probes=[Host()],
        network_latency=lambda: 0.004,
        wall_clock=lambda: 1_764_424_800.0,
    )
    spooled = sampler.sample_once()
    assert [(s["seq"], s["device"], s["pool"]) for s in spooled] == [(1, 0, None), (2, 1, None), (3, None, None)]
    assert spooled[0]["metrics"] == {"gpu_utilization_ratio": 0.7, "gpu_power_watts": 350.0}
    assert spooled[1]["metrics"] == {}  # the lost GPU reports its error, no made-up values
    assert spooled[1]["extra"]["probe_error"] == "nvmlDeviceGetHandleByIndex: GPU is lost"
    assert spooled[2]["metrics"]["network_latency_seconds"] == 0.004
    batch = spool.read(10)
    assert batch is not None
    body = {"node_id": "node-a", "samples": batch.samples}
    parsed = parse_batch(
        json.dumps(body).encode(), now=1_764_424_800.0, max_samples=100, max_future_seconds=300, max_replicas=256
    )
    assert len(parsed.samples) == 3
    assert telemetry.probe_errors.labels("two-gpus")._value.get() == 1


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        ([Reading({"gpu_utilization_ratio": 0.1}, device=0)], [{"network_latency_seconds": 0.01}]),
        (
            [Reading({"network_throughput_bytes_per_second": 5.0})],
            [{"network_throughput_bytes_per_second": 5.0, "network_latency_seconds": 0.01}],
        ),
    ],
)
def test_network_latency_joins_the_node_reading(readings: list[Reading], expected: list[dict[str, float]]) -> None:
    merged = with_network_latency(readings, 0.01)
    assert [r.metrics for r in merged if r.device is None and r.pool is None] == expected


def test_no_latency_leaves_it_absent() -> None:
    readings = [Reading({"network_throughput_bytes_per_second": 5.0})]
    assert with_network_latency(readings, None) == readings


def wait_for_first_result(probe: BackgroundProbe) -> list[Reading]:
    for _ in range(200):
        if readings := probe.read():
            return readings
        threading.Event().wait(0.02)
    raise AssertionError("the background probe never produced a result")


def test_a_slow_probe_runs_beside_the_tick() -> None:
    probe = BackgroundProbe(Slow(), 0.05)
    try:
        started = time.perf_counter()
        assert probe.read() == []  # nothing measured yet: nothing reported
        assert time.perf_counter() - started < 0.05  # the tick never waits for the engine's 300 ms
        assert wait_for_first_result(probe)[0].metrics == {"queue_depth_requests": 4.0}
    finally:
        probe.close()


def test_a_result_past_its_age_is_reported_stale_not_current() -> None:
    clock = [50.0]
    probe = BackgroundProbe(Slow(), 0.05, stale_after_s=2.0, clock=lambda: clock[0])
    try:
        wait_for_first_result(probe)
        clock[0] += 10.0  # the engine has not answered for 10 s
        (reading,) = probe.read()
        assert reading.metrics == {}
        assert reading.pool == "llama-8b"
        assert reading.error is not None
        assert "s old" in reading.error
    finally:
        probe.close()
