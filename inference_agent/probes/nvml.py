"""The NVML probe: per-GPU readings from nvidia-ml-py, and the one conversion from NVML's raw values to a Reading.

``NvmlProbe`` only gathers raw values (percent, bytes, mW, °C, MHz, counts, exactly as NVML returns them) into a
``RawGpuSample``; ``to_reading`` turns them into the catalog's units. The replay probe feeds recorded raw values through
the same ``to_reading``, so a recording exercises the very conversions a real node runs.
"""

# ruff: noqa: N802 — the Protocol below mirrors NVML's C function names (nvmlDeviceGetPowerUsage, ...)

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, TypeVar

from inference_agent.probes.base import GpuInfo, ProbeUnavailable, Reading

log = logging.getLogger(__name__)
T = TypeVar("T")

# nvml.h values (the same numbers as pynvml's NVML_* names; tests/inference_agent/test_nvml_probe.py checks them).
NVML_TEMPERATURE_GPU = 0
NVML_VOLATILE_ECC = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
# nvmlMemory_v2: sizeof(nvmlMemory_v2_t) = 40 = 0x28, version 2 in the top byte. Its ``used`` leaves out the memory
# the driver reserves (~0.5 GiB on an H100), as nvidia-smi and DCGM_FI_DEV_FB_USED do; v1's ``used`` includes it.
NVML_MEMORY_V2 = 0x02000028

# An extra that fails with one of these is simply not there on this GPU (an SXM board has no fan): no error line.
UNSUPPORTED_CODES = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND})

PROCESS_LIST_INTERVAL_S = 5.0


class NvmlApi(Protocol):
    """The part of pynvml this probe calls; ``fake_nvml.FakeNvml`` implements it for tests."""

    @property
    def NVMLError(self) -> type[Exception]: ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any, /) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any, /) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, /, version: int | None = None) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any, /) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, /) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int, /) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int, /) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetFanSpeed(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any, /) -> Sequence[Any]: ...


class RawField(StrEnum):
    """One raw NVML value, in NVML's own unit; the key of a recording's ``nvml`` object."""

    UTILIZATION_GPU = "utilization_gpu"  # percent, nvmlDeviceGetUtilizationRates().gpu
    UTILIZATION_MEMORY = "utilization_memory"  # percent, nvmlDeviceGetUtilizationRates().memory
    MEMORY_USED = "memory_used"  # bytes, nvmlDeviceGetMemoryInfo(v2).used
    MEMORY_RESERVED = "memory_reserved"  # bytes, nvmlDeviceGetMemoryInfo(v2).reserved
    POWER_USAGE = "power_usage"  # milliwatts, nvmlDeviceGetPowerUsage
    TEMPERATURE_GPU = "temperature_gpu"  # °C, nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
    ECC_VOLATILE_CORRECTED = "ecc_volatile_corrected"  # count since driver load, nvmlDeviceGetTotalEccErrors
    ECC_VOLATILE_UNCORRECTED = "ecc_volatile_uncorrected"
    CLOCK_SM = "clock_sm"  # MHz, nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
    CLOCK_MEM = "clock_mem"  # MHz, nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)
    CLOCKS_EVENT_REASONS = "clocks_event_reasons"  # bitmask, nvmlDeviceGetCurrentClocksEventReasons
    PCIE_REPLAY_COUNTER = "pcie_replay_counter"  # count, nvmlDeviceGetPcieReplayCounter
    FAN_SPEED = "fan_speed"  # percent of the fan's maximum, nvmlDeviceGetFanSpeed
    ENFORCED_POWER_LIMIT = "enforced_power_limit"  # milliwatts, nvmlDeviceGetEnforcedPowerLimit
    COMPUTE_PROCESSES = "compute_processes"  # count, len(nvmlDeviceGetComputeRunningProcesses)


@dataclass
class RawGpuSample:
    """What NVML said about one GPU at one read: raw values (absent when unread) and one line per failed call."""

    index: int
    values: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


# (raw field, reading name, divisor). 83 % / 100 → 0.83; 312_456 mW / 1000 → 312.456 W; bytes and °C as they are.
METRIC_CONVERSIONS: tuple[tuple[RawField, str, int], ...] = (
    (RawField.UTILIZATION_GPU, "gpu_utilization_ratio", 100),
    (RawField.MEMORY_USED, "gpu_memory_used_bytes", 1),
    (RawField.UTILIZATION_MEMORY, "gpu_memory_bandwidth_utilization_ratio", 100),
    (RawField.POWER_USAGE, "gpu_power_watts", 1000),
    (RawField.TEMPERATURE_GPU, "gpu_temperature_celsius", 1),
)
# Extras for failure prediction. Fan 45 % / 100 → 0.45; enforced limit 700_000 mW / 1000 → 700 W.
EXTRA_CONVERSIONS: tuple[tuple[RawField, str, int], ...] = (
    (RawField.MEMORY_RESERVED, "gpu_memory_reserved_bytes", 1),
    (RawField.ECC_VOLATILE_CORRECTED, "gpu_ecc_volatile_corrected_errors", 1),
    (RawField.ECC_VOLATILE_UNCORRECTED, "gpu_ecc_volatile_uncorrected_errors", 1),
    (RawField.CLOCK_SM, "gpu_sm_clock_mhz", 1),
    (RawField.CLOCK_MEM, "gpu_memory_clock_mhz", 1),
    (RawField.CLOCKS_EVENT_REASONS, "gpu_clocks_event_reasons", 1),
    (RawField.PCIE_REPLAY_COUNTER, "gpu_pcie_replay_count", 1),
    (RawField.FAN_SPEED, "gpu_fan_speed_ratio", 100),
    (RawField.ENFORCED_POWER_LIMIT, "gpu_power_limit_watts", 1000),
    (RawField.COMPUTE_PROCESSES, "gpu_compute_processes", 1),
)
# nvml.h nvmlClocksEventReason* bits (the older nvmlClocksThrottleReason* names have the same values).
CLOCKS_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_KNOWN_REASONS = sum(bit for bit, _ in CLOCKS_EVENT_REASONS)


def clocks_event_reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clocks-event mask: 0x24 → ["sw_power_cap", "sw_thermal_slowdown"]."""
    names = [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]
    unknown = mask & ~_KNOWN_REASONS
    return names + [f"0x{1 << b:x}" for b in range(unknown.bit_length()) if unknown >> b & 1]


def _convert(value: int, divisor: int) -> float:
    # Divide rather than multiply: 83 / 100 is exactly the double nearest 0.83; 83 * 0.01 is 0.8300000000000001.
    return value if divisor == 1 else value / divisor


def to_reading(raw: RawGpuSample) -> Reading:
    """NVML's raw values → the catalog's units; a value NVML did not give stays absent, never a made-up zero."""
    metrics = {name: _convert(raw.values[f], d) for f, name, d in METRIC_CONVERSIONS if f in raw.values}
    extra: dict[str, Any] = {name: _convert(raw.values[f], d) for f, name, d in EXTRA_CONVERSIONS if f in raw.values}
    if RawField.CLOCKS_EVENT_REASONS in raw.values:
        extra["gpu_clocks_event_reason_names"] = clocks_event_reason_names(raw.values[RawField.CLOCKS_EVENT_REASONS])
    return Reading(metrics=metrics, device=raw.index, extra=extra, error="; ".join(raw.errors) or None)


def _text(value: str | bytes) -> str:
    """Old nvidia-ml-py releases answer strings as bytes."""
    return value.decode() if isinstance(value, bytes) else value


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


_INIT_REASONS = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 is missing: no NVIDIA driver is installed on this machine",
    NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not running: no GPU, or the driver is not loaded",
    NVML_ERROR_NO_PERMISSION: "this user may not open /dev/nvidia*",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "the NVML library and the kernel driver differ in version: reload or reboot",
}


def _init_failure(exc: Exception) -> str:
    reason = _INIT_REASONS.get(_code(exc) or 0, "NVML could not start")
    return f"nvmlInit: {exc} ({reason})"


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise ProbeUnavailable(f"nvidia-ml-py is not installed ({exc}); install fleetpilot[agent]") from exc
    return pynvml


class _Read(NamedTuple):
    """One NVML call of a read: its name (for the error line), whether it is an extra, and how to do it."""

    function: str
    extra: bool
    read: Callable[[Any], dict[str, int]]


_CORRECTED_VOLATILE = (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)
_UNCORRECTED_VOLATILE = (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)


def _one(extra: bool, key: RawField, function: Callable[..., int], *args: int) -> _Read:
    """A call that gives one raw value: ``function(handle, *args)``, named in error lines by its NVML name."""
    return _Read(function.__name__, extra, lambda handle: {key: int(function(handle, *args))})


class NvmlProbe:
    """Per-GPU readings through NVML; one failing call leaves only its own values absent, other GPUs go on."""

    name = "nvml"

    def __init__(
        self,
        nvml: NvmlApi,
        device_count: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        process_interval_s: float = PROCESS_LIST_INTERVAL_S,
    ) -> None:
        """Use ``open()``: this expects NVML already initialised and ``device_count`` from nvmlDeviceGetCount."""
        self._nvml = nvml
        self._device_count = device_count
        self._clock = clock
        self._process_interval_s = process_interval_s
        self._handles: dict[int, Any] = {}
        self._unsupported: set[tuple[int, int]] = set()  # (GPU, call position) that said NOT_SUPPORTED: not asked again
        self._process_counts: dict[int, int] = {}
        self._processes_read_at: float | None = None
        self._memory_v2 = True
        self._closed = False
        self._reads = self._read_table()
        self._process_read = _Read("nvmlDeviceGetComputeRunningProcesses", True, self._processes)
        # pynvml turns FUNCTION_NOT_FOUND of the process list into this non-NVMLError on an old driver
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._library_mismatch: tuple[type[Exception], ...] = (mismatch,) if mismatch else ()

    @classmethod
    def open(
        cls,
        nvml: NvmlApi | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        process_interval_s: float = PROCESS_LIST_INTERVAL_S,
    ) -> NvmlProbe:
        """Initialise NVML (pynvml unless ``nvml`` is given); ``ProbeUnavailable`` says why when there is no GPU."""
        api: NvmlApi = nvml if nvml is not None else _import_pynvml()
        try:
            api.nvmlInit()
        except api.NVMLError as exc:
            raise ProbeUnavailable(_init_failure(exc)) from exc
        try:
            count = api.nvmlDeviceGetCount()
        except api.NVMLError as exc:
            _shutdown(api)
            raise ProbeUnavailable(f"nvmlDeviceGetCount: {exc}") from exc
        if count == 0:
            _shutdown(api)
            raise ProbeUnavailable("NVML started but sees no GPU on this machine")
        return cls(api, count, clock=clock, process_interval_s=process_interval_s)

    def inventory(self) -> list[GpuInfo]:
        """Name, UUID, memory total and driver of every GPU; a field NVML refuses is None (and logged)."""
        driver = self._attempt("nvmlSystemGetDriverVersion", lambda: _text(self._nvml.nvmlSystemGetDriverVersion()))
        return [self._gpu_info(index, driver) for index in range(self._device_count)]

    def read(self) -> list[Reading]:
        return [to_reading(raw) for raw in self.read_raw()]

    def read_raw(self) -> list[RawGpuSample]:
        """Every GPU's raw values; what ``read`` converts and what a recording stores."""
        now = self._clock()
        refresh = self._processes_read_at is None or now - self._processes_read_at >= self._process_interval_s
        if refresh:
            self._processes_read_at = now
        return [self._sample(index, refresh) for index in range(self._device_count)]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _shutdown(self._nvml)

    def _read_table(self) -> tuple[_Read, ...]:
        n = self._nvml
        return (
            _Read("nvmlDeviceGetUtilizationRates", False, self._utilization),
            _Read("nvmlDeviceGetMemoryInfo", False, self._memory),
            _one(False, RawField.POWER_USAGE, n.nvmlDeviceGetPowerUsage),
            _one(False, RawField.TEMPERATURE_GPU, n.nvmlDeviceGetTemperature, NVML_TEMPERATURE_GPU),
            _one(True, RawField.ECC_VOLATILE_CORRECTED, n.nvmlDeviceGetTotalEccErrors, *_CORRECTED_VOLATILE),
            _one(True, RawField.ECC_VOLATILE_UNCORRECTED, n.nvmlDeviceGetTotalEccErrors, *_UNCORRECTED_VOLATILE),
            _one(True, RawField.CLOCK_SM, n.nvmlDeviceGetClockInfo, NVML_CLOCK_SM),
            _one(True, RawField.CLOCK_MEM, n.nvmlDeviceGetClockInfo, NVML_CLOCK_MEM),
            _Read("nvmlDeviceGetCurrentClocksEventReasons", True, self._event_reasons),
            _one(True, RawField.PCIE_REPLAY_COUNTER, n.nvmlDeviceGetPcieReplayCounter),
            _one(True, RawField.FAN_SPEED, n.nvmlDeviceGetFanSpeed),
            _one(True, RawField.ENFORCED_POWER_LIMIT, n.nvmlDeviceGetEnforcedPowerLimit),
        )

    def _sample(self, index: int, refresh_processes: bool) -> RawGpuSample:
        raw = RawGpuSample(index)
        try:
            handle = self._handle(index)
        except self._nvml.NVMLError as exc:
            raw.errors.append(f"nvmlDeviceGetHandleByIndex: {exc}")
            return raw
        for position, call in enumerate(self._reads):
            self._call(raw, position, call, handle)
        if refresh_processes:
            self._process_counts.pop(index, None)
            self._call(raw, len(self._reads), self._process_read, handle)
            if RawField.COMPUTE_PROCESSES in raw.values:
                self._process_counts[index] = raw.values[RawField.COMPUTE_PROCESSES]
        elif index in self._process_counts:
            # the process list is costly: between refreshes the last count stands (at most 5 s old)
            raw.values[RawField.COMPUTE_PROCESSES] = self._process_counts[index]
        return raw

    def _call(self, raw: RawGpuSample, position: int, call: _Read, handle: Any) -> None:
        """Run one read into ``raw``; a failure is an error line, except an extra this GPU does not support."""
        if (raw.index, position) in self._unsupported:
            return
        try:
            raw.values.update(call.read(handle))
        except self._nvml.NVMLError as exc:
            if call.extra and _code(exc) in UNSUPPORTED_CODES:
                self._unsupported.add((raw.index, position))
            else:
                raw.errors.append(f"{call.function}: {exc}")

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def _utilization(self, handle: Any) -> dict[str, int]:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        return {RawField.UTILIZATION_GPU: int(rates.gpu), RawField.UTILIZATION_MEMORY: int(rates.memory)}

    def _memory(self, handle: Any) -> dict[str, int]:
        """Memory in use as nvidia-smi counts it (v2); drivers without v2 (before R510) fall back to v1."""
        if self._memory_v2:
            try:
                info = self._nvml.nvmlDeviceGetMemoryInfo(handle, version=NVML_MEMORY_V2)
                return {RawField.MEMORY_USED: int(info.used), RawField.MEMORY_RESERVED: int(info.reserved)}
            except self._nvml.NVMLError as exc:
                if _code(exc) not in {NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}:
                    raise
                self._memory_v2 = False
        return {RawField.MEMORY_USED: int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)}

    def _event_reasons(self, handle: Any) -> dict[str, int]:
        """Clock-event (formerly throttle) reasons; drivers before R535 know only the older function name."""
        try:
            reasons = self._nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        except self._nvml.NVMLError as exc:
            if _code(exc) != NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            reasons = self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        return {RawField.CLOCKS_EVENT_REASONS: reasons}

    def _processes(self, handle: Any) -> dict[str, int]:
        try:
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self._library_mismatch as exc:
            raise self._nvml.NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND) from exc
        return {RawField.COMPUTE_PROCESSES: len(processes)}

    def _gpu_info(self, index: int, driver: str | None) -> GpuInfo:
        try:
            handle = self._handle(index)
        except self._nvml.NVMLError as exc:
            log.warning("GPU %d: nvmlDeviceGetHandleByIndex: %s; its inventory is unknown", index, exc)
            return GpuInfo(index=index, driver_version=driver)
        n = self._nvml
        return GpuInfo(
            index=index,
            name=self._attempt("nvmlDeviceGetName", lambda: _text(n.nvmlDeviceGetName(handle))),
            uuid=self._attempt("nvmlDeviceGetUUID", lambda: _text(n.nvmlDeviceGetUUID(handle))),
            memory_total_bytes=self._attempt(
                "nvmlDeviceGetMemoryInfo", lambda: int(n.nvmlDeviceGetMemoryInfo(handle).total)
            ),
            driver_version=driver,
        )

    def _attempt(self, function: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except self._nvml.NVMLError as exc:
            log.warning("%s: %s; left out of the inventory", function, exc)
            return None


def _shutdown(nvml: NvmlApi) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError as exc:
        log.warning("nvmlShutdown: %s", exc)
