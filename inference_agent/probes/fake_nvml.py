"""A small in-repo stand-in for pynvml, for tests: the functions ``NvmlProbe`` calls, NVML's error codes and messages,
and errors injected per GPU and per call.

Each fake GPU holds raw NVML values keyed like a recording (``RawField``: percent, bytes, mW, °C, MHz, counts); a value
it lacks answers NVML_ERROR_NOT_SUPPORTED, as a real board without that sensor does (an SXM H100 has no fan).
"""

# ruff: noqa: N802 — pynvml's names (nvmlDeviceGetPowerUsage, ...)

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from inference_agent.probes.nvml import RawField

# pynvml's NVML_ERROR_* codes and the messages str(NVMLError) gives for them
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999
MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
# nvmlMemory_v2, NVML_CLOCK_SM / NVML_CLOCK_MEM, NVML_MEMORY_ERROR_TYPE_CORRECTED / _UNCORRECTED
MEMORY_V2 = 0x02000028
CLOCK_FIELDS = {1: RawField.CLOCK_SM, 2: RawField.CLOCK_MEM}
ECC_FIELDS = {0: RawField.ECC_VOLATILE_CORRECTED, 1: RawField.ECC_VOLATILE_UNCORRECTED}


class NVMLError(Exception):
    """pynvml's error: ``value`` is the NVML_ERROR_* code, ``str()`` its message."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def busy_h100_values() -> dict[str, int]:
    """Raw values of a busy H100 SXM (no fan) within NVML's documented ranges."""
    return {
        RawField.UTILIZATION_GPU: 83,
        RawField.UTILIZATION_MEMORY: 41,
        RawField.MEMORY_USED: 61_203_283_968,
        RawField.MEMORY_RESERVED: 594_542_592,
        RawField.POWER_USAGE: 312_456,
        RawField.TEMPERATURE_GPU: 71,
        RawField.ECC_VOLATILE_CORRECTED: 2,
        RawField.ECC_VOLATILE_UNCORRECTED: 0,
        RawField.CLOCK_SM: 1980,
        RawField.CLOCK_MEM: 2619,
        RawField.CLOCKS_EVENT_REASONS: 0x4,
        RawField.PCIE_REPLAY_COUNTER: 0,
        RawField.ENFORCED_POWER_LIMIT: 700_000,
        RawField.COMPUTE_PROCESSES: 1,
    }


@dataclass
class FakeGpu:
    """One fake GPU: its raw values, its inventory, and ``failures`` (NVML function name → error code it raises)."""

    values: dict[str, int] = field(default_factory=busy_h100_values)
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-5f2a7c1e-8d3b-4c69-a0e4-1b9d6f3c2a70"
    memory_total: int = 85_520_809_984
    failures: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeHandle:
    index: int


@dataclass(frozen=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True)
class MemoryInfo:
    total: int
    used: int
    free: int
    reserved: int = 0


class FakeNvml:
    """pynvml's calls over fake GPUs; ``calls`` counts every call by function name."""

    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver_version: str = "550.90.07",
        init_error: int | None = None,
        memory_v2: bool = True,
        event_reasons: bool = True,
    ) -> None:
        """``memory_v2``/``event_reasons`` False act as a driver older than R510/R535 (FUNCTION_NOT_FOUND)."""
        self.gpus = gpus
        self.driver_version = driver_version
        self.init_error = init_error
        self.memory_v2 = memory_v2
        self.event_reasons = event_reasons
        self.initialized = False
        self.calls: Counter[str] = Counter()

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> FakeHandle:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        self._inject(self.gpus[index], "nvmlDeviceGetHandleByIndex")
        return FakeHandle(index)

    def nvmlDeviceGetName(self, handle: FakeHandle, /) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, handle: FakeHandle, /) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, /, version: int | None = None) -> MemoryInfo:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        used = self._value(gpu, RawField.MEMORY_USED)
        reserved = gpu.values.get(RawField.MEMORY_RESERVED, 0)
        if version is None:  # v1: ``used`` counts the reserved memory too
            return MemoryInfo(total=gpu.memory_total, used=used + reserved, free=gpu.memory_total - used - reserved)
        if version != MEMORY_V2 or not self.memory_v2:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return MemoryInfo(total=gpu.memory_total, used=used, free=gpu.memory_total - used - reserved, reserved=reserved)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle, /) -> Utilization:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return Utilization(self._value(gpu, RawField.UTILIZATION_GPU), self._value(gpu, RawField.UTILIZATION_MEMORY))

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle, /) -> int:
        return self._value(self._gpu(handle, "nvmlDeviceGetPowerUsage"), RawField.POWER_USAGE)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int, /) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != 0:  # NVML_TEMPERATURE_GPU is the only sensor
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._value(gpu, RawField.TEMPERATURE_GPU)

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int, /) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if counter_type != 0:  # only NVML_VOLATILE_ECC is recorded
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._value(gpu, ECC_FIELDS[error_type])

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int, /) -> int:
        return self._value(self._gpu(handle, "nvmlDeviceGetClockInfo"), CLOCK_FIELDS[clock_type])

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle, /) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        if not self.event_reasons:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._value(gpu, RawField.CLOCKS_EVENT_REASONS)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle, /) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._value(gpu, RawField.CLOCKS_EVENT_REASONS)

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle, /) -> int:
        return self._value(self._gpu(handle, "nvmlDeviceGetPcieReplayCounter"), RawField.PCIE_REPLAY_COUNTER)

    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle, /) -> int:
        return self._value(self._gpu(handle, "nvmlDeviceGetFanSpeed"), RawField.FAN_SPEED)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle, /) -> int:
        return self._value(self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit"), RawField.ENFORCED_POWER_LIMIT)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle, /) -> list[object]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [object() for _ in range(self._value(gpu, RawField.COMPUTE_PROCESSES))]

    def _check(self, function: str) -> None:
        self.calls[function] += 1
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: FakeHandle, function: str) -> FakeGpu:
        self._check(function)
        gpu = self.gpus[handle.index]
        self._inject(gpu, function)
        return gpu

    @staticmethod
    def _inject(gpu: FakeGpu, function: str) -> None:
        if function in gpu.failures:
            raise NVMLError(gpu.failures[function])

    @staticmethod
    def _value(gpu: FakeGpu, key: RawField) -> int:
        if key not in gpu.values:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.values[key]
