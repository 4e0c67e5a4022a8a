"""The NVML probe against the in-repo fake: exact conversions, per-GPU and per-call errors, the 5 s process list."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from inference_agent.probes import fake_nvml, nvml
from inference_agent.probes.base import GpuInfo, ProbeUnavailable
from inference_agent.probes.fake_nvml import FakeGpu, FakeHandle, FakeNvml, busy_h100_values
from inference_agent.probes.nvml import NvmlProbe, RawField, RawGpuSample, clocks_event_reason_names, to_reading
from tests.support.clock import FakeClock
from wire.catalog import METRIC_NAMES, METRICS, Scope

F = RawField


def open_probe(*gpus: FakeGpu, clock: FakeClock | None = None, **options: Any) -> tuple[NvmlProbe, FakeNvml]:
    fake = FakeNvml(list(gpus), **options)
    return NvmlProbe.open(fake, clock=clock or FakeClock()), fake


@pytest.mark.parametrize(
    ("field", "raw", "name", "expected"),
    [
        (F.UTILIZATION_GPU, 83, "gpu_utilization_ratio", 0.83),
        (F.UTILIZATION_GPU, 100, "gpu_utilization_ratio", 1.0),
        (F.UTILIZATION_GPU, 0, "gpu_utilization_ratio", 0.0),
        (F.UTILIZATION_MEMORY, 41, "gpu_memory_bandwidth_utilization_ratio", 0.41),
        (F.MEMORY_USED, 61_203_283_968, "gpu_memory_used_bytes", 61_203_283_968),
        (F.POWER_USAGE, 312_456, "gpu_power_watts", 312.456),
        (F.POWER_USAGE, 700_000, "gpu_power_watts", 700.0),
        (F.TEMPERATURE_GPU, 71, "gpu_temperature_celsius", 71),
    ],
)
def test_metric_conversions_are_exact(field: RawField, raw: int, name: str, expected: float) -> None:
    reading = to_reading(RawGpuSample(0, {field: raw}))
    assert reading.metrics == {name: expected}
    assert reading.device == 0 and reading.error is None


@pytest.mark.parametrize(
    ("field", "raw", "name", "expected"),
    [
        (F.MEMORY_RESERVED, 577_765_376, "gpu_memory_reserved_bytes", 577_765_376),
        (F.ECC_VOLATILE_CORRECTED, 3, "gpu_ecc_volatile_corrected_errors", 3),
        (F.ECC_VOLATILE_UNCORRECTED, 1, "gpu_ecc_volatile_uncorrected_errors", 1),
        (F.CLOCK_SM, 1980, "gpu_sm_clock_mhz", 1980),
        (F.CLOCK_MEM, 2619, "gpu_memory_clock_mhz", 2619),
        (F.PCIE_REPLAY_COUNTER, 7, "gpu_pcie_replay_count", 7),
        (F.FAN_SPEED, 45, "gpu_fan_speed_ratio", 0.45),
        (F.ENFORCED_POWER_LIMIT, 700_000, "gpu_power_limit_watts", 700.0),
        (F.COMPUTE_PROCESSES, 2, "gpu_compute_processes", 2),
    ],
)
def test_extra_conversions_are_exact(field: RawField, raw: int, name: str, expected: float) -> None:
    reading = to_reading(RawGpuSample(0, {field: raw}))
    assert reading.metrics == {}
    assert reading.extra == {name: expected}


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, []),
        (0x1, ["gpu_idle"]),
        (0x24, ["sw_power_cap", "sw_thermal_slowdown"]),
        (0x48, ["hw_slowdown", "hw_thermal_slowdown"]),
        (0x204, ["sw_power_cap", "0x200"]),
    ],
)
def test_clocks_event_reasons_are_decoded(mask: int, names: list[str]) -> None:
    assert clocks_event_reason_names(mask) == names
    extra = to_reading(RawGpuSample(0, {F.CLOCKS_EVENT_REASONS: mask})).extra
    assert extra == {"gpu_clocks_event_reasons": mask, "gpu_clocks_event_reason_names": names}


def test_the_five_gpu_metrics_are_the_catalogs() -> None:
    converted = {name for _field, name, _divisor in nvml.METRIC_CONVERSIONS}
    assert converted == {m.name for m in METRICS if m.scope is Scope.GPU}
    assert converted <= set(METRIC_NAMES)


def test_a_healthy_gpu_reads_every_metric_and_extra() -> None:
    probe, _fake = open_probe(FakeGpu())
    [reading] = probe.read()
    assert reading.device == 0 and reading.error is None
    assert reading.metrics == {
        "gpu_utilization_ratio": 0.83,
        "gpu_memory_used_bytes": 61_203_283_968,
        "gpu_memory_bandwidth_utilization_ratio": 0.41,
        "gpu_power_watts": 312.456,
        "gpu_temperature_celsius": 71,
    }
    assert reading.extra["gpu_compute_processes"] == 1
    assert reading.extra["gpu_clocks_event_reason_names"] == ["sw_power_cap"]
    assert "gpu_fan_speed_ratio" not in reading.extra  # an SXM board has no fan: absent, and no error line


def test_a_gpu_whose_handle_fails_is_reported_and_the_others_go_on() -> None:
    lost = FakeGpu(failures={"nvmlDeviceGetHandleByIndex": fake_nvml.NVML_ERROR_GPU_IS_LOST})
    probe, _fake = open_probe(FakeGpu(), lost, FakeGpu())
    readings = probe.read()
    assert [r.device for r in readings] == [0, 1, 2]
    assert readings[1].metrics == {} and readings[1].extra == {}
    assert readings[1].error == "nvmlDeviceGetHandleByIndex: GPU is lost"
    assert readings[0].metrics == readings[2].metrics and len(readings[0].metrics) == 5
    assert readings[0].error is None and readings[2].error is None


@pytest.mark.parametrize(
    ("function", "code", "absent", "error"),
    [
        ("nvmlDeviceGetPowerUsage", fake_nvml.NVML_ERROR_NOT_SUPPORTED, {"gpu_power_watts"}, "Not Supported"),
        ("nvmlDeviceGetPowerUsage", fake_nvml.NVML_ERROR_UNKNOWN, {"gpu_power_watts"}, "Unknown Error"),
        ("nvmlDeviceGetTemperature", fake_nvml.NVML_ERROR_GPU_IS_LOST, {"gpu_temperature_celsius"}, "GPU is lost"),
        (
            "nvmlDeviceGetUtilizationRates",
            fake_nvml.NVML_ERROR_UNKNOWN,
            {"gpu_utilization_ratio", "gpu_memory_bandwidth_utilization_ratio"},
            "Unknown Error",
        ),
        (
            "nvmlDeviceGetMemoryInfo",
            fake_nvml.NVML_ERROR_NO_PERMISSION,
            {"gpu_memory_used_bytes"},
            "Insufficient Permissions",
        ),
    ],
)
def test_a_failing_metric_call_leaves_only_its_metric_absent_with_the_error(
    function: str, code: int, absent: set[str], error: str
) -> None:
    probe, _fake = open_probe(FakeGpu(failures={function: code}), FakeGpu())
    failing, healthy = probe.read()
    assert set(healthy.metrics) - set(failing.metrics) == absent
    assert failing.error == f"{function}: {error}"
    assert healthy.error is None
    # the extras are read all the same (the reserved memory comes with the used memory, from the same call)
    assert set(healthy.extra) - set(failing.extra) <= {"gpu_memory_reserved_bytes"}


def test_errors_of_several_calls_are_all_listed() -> None:
    failures = {"nvmlDeviceGetPowerUsage": fake_nvml.NVML_ERROR_UNKNOWN, "nvmlDeviceGetTemperature": 15}
    probe, _fake = open_probe(FakeGpu(failures=failures))
    [reading] = probe.read()
    assert reading.error == "nvmlDeviceGetPowerUsage: Unknown Error; nvmlDeviceGetTemperature: GPU is lost"


@pytest.mark.parametrize(
    ("function", "extras"),
    [
        ("nvmlDeviceGetPcieReplayCounter", {"gpu_pcie_replay_count"}),
        ("nvmlDeviceGetTotalEccErrors", {"gpu_ecc_volatile_corrected_errors", "gpu_ecc_volatile_uncorrected_errors"}),
        ("nvmlDeviceGetClockInfo", {"gpu_sm_clock_mhz", "gpu_memory_clock_mhz"}),
        ("nvmlDeviceGetEnforcedPowerLimit", {"gpu_power_limit_watts"}),
        ("nvmlDeviceGetComputeRunningProcesses", {"gpu_compute_processes"}),
        (
            "nvmlDeviceGetCurrentClocksEventReasons",
            {"gpu_clocks_event_reasons", "gpu_clocks_event_reason_names"},
        ),
    ],
)
def test_an_unsupported_extra_is_just_absent_and_not_asked_again(function: str, extras: set[str]) -> None:
    probe, fake = open_probe(FakeGpu(failures={function: fake_nvml.NVML_ERROR_NOT_SUPPORTED}))
    [first] = probe.read()
    calls = fake.calls[function]
    [second] = probe.read()
    for reading in (first, second):
        assert reading.error is None and len(reading.metrics) == 5
        assert not extras & set(reading.extra)
    assert fake.calls[function] == calls


def test_an_extra_that_fails_for_a_real_reason_is_reported() -> None:
    probe, _fake = open_probe(FakeGpu(failures={"nvmlDeviceGetTotalEccErrors": fake_nvml.NVML_ERROR_NO_PERMISSION}))
    [reading] = probe.read()
    assert "gpu_ecc_volatile_corrected_errors" not in reading.extra
    assert reading.error == (
        "nvmlDeviceGetTotalEccErrors: Insufficient Permissions; nvmlDeviceGetTotalEccErrors: Insufficient Permissions"
    )


# (clock at each read, process-list calls so far): a refresh at 0 s, none before 5 s have passed, then one per 5 s
PROCESS_SCHEDULE = [(0.0, 1), (0.5, 1), (4.9, 1), (5.0, 2), (7.0, 2), (9.9, 2), (10.0, 3), (30.0, 4)]


def test_the_process_list_is_read_at_most_every_5_s() -> None:
    clock = FakeClock(now=1000.0)
    probe, fake = open_probe(FakeGpu(), FakeGpu(), clock=clock)
    for at, calls in PROCESS_SCHEDULE:
        clock.now = 1000.0 + at
        readings = probe.read()
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2 * calls, f"at {at} s"
        assert [r.extra["gpu_compute_processes"] for r in readings] == [1, 1]


def test_between_refreshes_the_last_process_count_stands() -> None:
    clock = FakeClock(now=0.0)
    gpu = FakeGpu()
    probe, _fake = open_probe(gpu, clock=clock)
    counts = []
    for at, processes in [(0.0, 1), (1.0, 3), (4.0, 3), (5.0, 3), (6.0, 0), (10.0, 0)]:
        clock.now = at
        gpu.values[F.COMPUTE_PROCESSES] = processes
        counts.append(probe.read()[0].extra["gpu_compute_processes"])
    assert counts == [1, 1, 1, 3, 3, 0]


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (fake_nvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found (libnvidia-ml.so.1 is missing"),
        (fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded (the NVIDIA kernel driver is not running"),
        (fake_nvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions (this user may not open /dev/nvidia*"),
        (fake_nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version mismatch."),
        (fake_nvml.NVML_ERROR_UNKNOWN, "Unknown Error (NVML could not start)"),
    ],
)
def test_no_nvml_is_probe_unavailable_with_the_reason(code: int, reason: str) -> None:
    with pytest.raises(ProbeUnavailable, match=r"^nvmlInit: ") as raised:
        open_probe(FakeGpu(), init_error=code)
    assert reason in str(raised.value)


def test_no_gpu_is_probe_unavailable_and_nvml_is_shut_down() -> None:
    fake = FakeNvml([])
    with pytest.raises(ProbeUnavailable, match="sees no GPU"):
        NvmlProbe.open(fake)
    assert not fake.initialized


def test_without_nvidia_ml_py_the_probe_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what an agent installed without fleetpilot[agent] sees
    with pytest.raises(ProbeUnavailable, match="nvidia-ml-py is not installed"):
        NvmlProbe.open()


def test_the_real_pynvml_either_opens_or_says_why() -> None:
    """On a machine without a driver pynvml raises its own NVMLError subclasses: none may leak through."""
    pytest.importorskip("pynvml")
    try:
        probe = NvmlProbe.open()
    except ProbeUnavailable as exc:
        assert str(exc)  # the reason, e.g. "nvmlInit: NVML Shared Library Not Found (libnvidia-ml.so.1 is missing..."
    else:
        probe.close()


def test_the_nvml_constants_are_pynvmls() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name in dir(nvml):
        if name.startswith("NVML_") and name != "NVML_MEMORY_V2":
            assert getattr(nvml, name) == getattr(pynvml, name), name
    assert pynvml.nvmlMemory_v2 == nvml.NVML_MEMORY_V2
    for bit, name in nvml.CLOCKS_EVENT_REASONS:
        camel = "".join(part.capitalize() for part in name.split("_"))  # sw_power_cap → SwPowerCap
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == bit, name


def test_the_fakes_errors_are_pynvmls() -> None:
    pynvml = pytest.importorskip("pynvml")
    for code, message in fake_nvml.MESSAGES.items():
        assert str(pynvml.NVMLError(code)) == message
    for name in dir(fake_nvml):
        if name.startswith("NVML_ERROR_"):
            assert getattr(fake_nvml, name) == getattr(pynvml, name), name


def test_inventory_names_every_gpu() -> None:
    second = FakeGpu(uuid="GPU-2", failures={"nvmlDeviceGetName": fake_nvml.NVML_ERROR_UNKNOWN})
    probe, _fake = open_probe(FakeGpu(), second, driver_version="550.90.07")
    assert probe.inventory() == [
        GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-5f2a7c1e-8d3b-4c69-a0e4-1b9d6f3c2a70", 85_520_809_984, "550.90.07"),
        GpuInfo(1, None, "GPU-2", 85_520_809_984, "550.90.07"),
    ]


def test_memory_used_is_v2_and_falls_back_to_v1_on_an_old_driver() -> None:
    values = busy_h100_values()
    new, _fake = open_probe(FakeGpu(values=values))
    old, _fake = open_probe(FakeGpu(values=values), memory_v2=False)
    [reading_new], [reading_old] = new.read(), old.read()
    # v2 leaves the driver's reserved memory out, as nvidia-smi does; v1 counts it in
    assert reading_new.metrics["gpu_memory_used_bytes"] == values[F.MEMORY_USED]
    assert reading_new.extra["gpu_memory_reserved_bytes"] == values[F.MEMORY_RESERVED]
    assert reading_old.metrics["gpu_memory_used_bytes"] == values[F.MEMORY_USED] + values[F.MEMORY_RESERVED]
    assert "gpu_memory_reserved_bytes" not in reading_old.extra
    assert reading_old.error is None


def test_event_reasons_fall_back_to_the_throttle_name_on_an_old_driver() -> None:
    probe, fake = open_probe(FakeGpu(), event_reasons=False)
    [reading] = probe.read()
    assert reading.extra["gpu_clocks_event_reasons"] == 0x4 and reading.error is None
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


class LibraryMismatch(Exception):
    """pynvml's NVMLLibraryMismatchError: what its unversioned process list raises on an old driver."""


class OldDriverNvml(FakeNvml):
    NVMLLibraryMismatchError = LibraryMismatch

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle, /) -> list[object]:  # noqa: N802
        raise LibraryMismatch("Unversioned function called and the pyNVML version does not match")


def test_a_process_list_the_driver_lacks_is_just_absent() -> None:
    probe = NvmlProbe.open(OldDriverNvml([FakeGpu()]), clock=FakeClock())
    [reading] = probe.read()
    assert "gpu_compute_processes" not in reading.extra and reading.error is None


def test_close_shuts_nvml_down_once() -> None:
    probe, fake = open_probe(FakeGpu())
    probe.close()
    probe.close()
    assert not fake.initialized
    assert fake.calls["nvmlShutdown"] == 1
