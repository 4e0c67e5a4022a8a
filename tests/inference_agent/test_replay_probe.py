"""The replay probe: the packaged recording, NVML's own conversions, looping, and standing for 8 GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inference_agent.probes.base import GpuInfo
from inference_agent.probes.fake_nvml import FakeGpu, FakeNvml
from inference_agent.probes.nvml import NvmlProbe, RawField, RawGpuSample
from inference_agent.probes.replay import (
    DEFAULT_RECORDING,
    Recording,
    RecordingError,
    ReplayProbe,
    inventory_record,
    load_recording,
    parse_recording,
    recording_lines,
    sample_record,
)
from tests.support.clock import FakeClock

FIXTURE = Path(__file__).parents[2] / "inference_agent" / "probes" / "fixtures" / DEFAULT_RECORDING


def recording(*samples: list[dict[str, int]], errors: list[str] | None = None) -> Recording:
    """A recording with one GPU per dict of a sample; ``errors`` go to GPU 0 of the first sample."""
    gpus = len(samples[0])
    lines = [
        json.dumps(inventory_record(GpuInfo(i, "NVIDIA H100 80GB HBM3", f"GPU-{i}", 1 << 36, "550")))
        for i in range(gpus)
    ]
    for n, sample in enumerate(samples):
        for i, values in enumerate(sample):
            raw = RawGpuSample(i, dict(values), list(errors or []) if n == 0 and i == 0 else [])
            lines.append(json.dumps(sample_record(n, raw)))
    return parse_recording(lines)


def utilization(percent: int) -> dict[str, int]:
    return {RawField.UTILIZATION_GPU: percent}


def test_the_packaged_recording_is_small_synthetic_and_says_so() -> None:
    assert FIXTURE.stat().st_size < 200_000
    loaded = load_recording()
    assert loaded.meta["synthetic"] is True and "Synthetic" in loaded.meta["note"]
    assert [info.index for info in loaded.inventory] == [0, 1]
    assert len(loaded.samples) == 160
    assert load_recording(FIXTURE) == loaded


def test_the_packaged_recording_stays_within_nvmls_documented_ranges() -> None:
    for sample in load_recording().samples:
        for raw in sample:
            v = raw.values
            assert 0 <= v[RawField.UTILIZATION_GPU] <= 100 and 0 <= v[RawField.UTILIZATION_MEMORY] <= 100
            assert 0 < v[RawField.MEMORY_USED] + v[RawField.MEMORY_RESERVED] <= 85_520_809_984
            assert 0 < v[RawField.POWER_USAGE] <= v[RawField.ENFORCED_POWER_LIMIT] == 700_000
            assert 20 <= v[RawField.TEMPERATURE_GPU] <= 95
            assert RawField.FAN_SPEED not in v and not raw.errors


def test_replay_converts_exactly_as_the_nvml_probe_does() -> None:
    """The same raw values through NVML (fake) and through a recording give equal readings: one conversion."""
    loaded = load_recording()
    for sample in (loaded.samples[0], loaded.samples[100], loaded.samples[150]):
        fake = FakeNvml([FakeGpu(values=dict(raw.values)) for raw in sample])
        live = NvmlProbe.open(fake, clock=FakeClock()).read()
        replayed = ReplayProbe(Recording(loaded.inventory, (sample,))).read()
        assert replayed == live


def test_the_replay_loops_over_the_recording() -> None:
    probe = ReplayProbe(recording([utilization(10)], [utilization(20)], [utilization(30)]))
    seen = [probe.read()[0].metrics["gpu_utilization_ratio"] for _ in range(7)]
    assert seen == [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.1]


# (device, recorded GPU it plays, samples it is shifted by) for 8 devices from 2 recorded GPUs and 8 samples
STAND_INS = [(0, 0, 0), (1, 1, 0), (2, 0, 2), (3, 1, 2), (4, 0, 4), (5, 1, 4), (6, 0, 6), (7, 1, 6)]


def test_the_replay_stands_for_8_gpus_from_2_recorded() -> None:
    samples = [[utilization(n), utilization(50 + n)] for n in range(8)]
    probe = ReplayProbe(recording(*samples), gpus=8)
    for step in range(3):
        readings = probe.read()
        assert [r.device for r in readings] == list(range(8))
        for device, source, shift in STAND_INS:
            expected = (50 if source else 0) + (step + shift) % 8
            assert readings[device].metrics["gpu_utilization_ratio"] == expected / 100, (step, device)


def test_the_stand_ins_have_the_inventory_shape_and_distinct_uuids() -> None:
    probe = ReplayProbe.from_file(gpus=8)
    inventory = probe.inventory()
    assert [info.index for info in inventory] == list(range(8))
    assert len({info.uuid for info in inventory}) == 8
    assert inventory[:2] == list(load_recording().inventory)
    assert all(info.name == "NVIDIA H100 80GB HBM3" and info.memory_total_bytes == 85_520_809_984 for info in inventory)
    assert inventory == ReplayProbe.from_file(gpus=8).inventory()  # stable across runs
    assert len(probe.read()) == 8


def test_fewer_gpus_than_recorded_play_the_first_ones() -> None:
    probe = ReplayProbe.from_file(gpus=1)
    assert [r.device for r in probe.read()] == [0]
    assert [info.index for info in probe.inventory()] == [0]


def test_recorded_errors_travel_with_their_reading() -> None:
    probe = ReplayProbe(recording([{RawField.TEMPERATURE_GPU: 70}], errors=["nvmlDeviceGetPowerUsage: Unknown Error"]))
    [reading] = probe.read()
    assert reading.metrics == {"gpu_temperature_celsius": 70}
    assert reading.error == "nvmlDeviceGetPowerUsage: Unknown Error"


def test_records_round_trip() -> None:
    raw = RawGpuSample(1, {RawField.POWER_USAGE: 312_456}, ["nvmlDeviceGetTemperature: GPU is lost"])
    info = GpuInfo(1, "NVIDIA H200", "GPU-x", 150_754_820_096, "560.35.03")
    later = RawGpuSample(1, {RawField.POWER_USAGE: 298_000})
    lines = list(recording_lines([info], [[raw], [later]], {"synthetic": False, "interval_s": 0.5}))
    loaded = parse_recording(lines)
    assert loaded.inventory == (info,)
    assert loaded.samples == ((raw,), (later,))
    assert loaded.meta == {"kind": "meta", "synthetic": False, "interval_s": 0.5}
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)


INVENTORY = json.dumps(
    {"kind": "inventory", "index": 0, "name": "x", "uuid": "u", "memory_total_bytes": 1, "driver_version": "d"}
)


def sample_line(**changes: Any) -> str:
    return json.dumps({"kind": "sample", "sample": 0, "index": 0, "nvml": {"power_usage": 1}} | changes)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([INVENTORY, "{not json"], "line 2"),
        (
            [INVENTORY, sample_line(nvml={"power_watts": 1})],
            "line 2: ValueError(\"unknown raw NVML fields ['power_watts']",
        ),
        ([INVENTORY, sample_line(nvml={"power_usage": 312.4})], "raw NVML values are integers"),
        ([INVENTORY, sample_line(nvml={"power_usage": True})], "raw NVML values are integers"),
        ([INVENTORY, json.dumps({"kind": "note"})], "unknown kind 'note'"),
        ([INVENTORY, json.dumps({"kind": "sample", "sample": 0, "index": 0})], "line 2: KeyError('nvml')"),
        ([INVENTORY, sample_line(index=1)], "sample 0 has GPUs [1], the inventory [0]"),
        ([INVENTORY], "at least one inventory record and one sample"),
    ],
)
def test_a_bad_recording_names_its_fault(lines: list[str], message: str) -> None:
    with pytest.raises(RecordingError) as raised:
        parse_recording(lines)
    assert message in str(raised.value)


def test_at_least_one_gpu() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReplayProbe(load_recording(), gpus=0)
