"""The real NVML probe against nvidia-smi on a real GPU (scripts/gpu-check.sh); skips with the reason elsewhere."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from inference_agent.probes.base import ProbeUnavailable, Reading
from inference_agent.probes.nvml import NvmlProbe

pytestmark = pytest.mark.gpu

SMI_QUERY = "index,uuid,memory.used,temperature.gpu,power.draw"
MIB = 1 << 20
# an extra may fail for a reason of the host (permissions in a container); these calls may not
METRIC_CALLS = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTemperature",
)


@pytest.fixture
def probe() -> Iterator[NvmlProbe]:
    try:
        opened = NvmlProbe.open()
    except ProbeUnavailable as exc:
        pytest.skip(f"no GPU: {exc}")
    yield opened
    opened.close()


def nvidia_smi() -> dict[int, list[str]]:
    """nvidia-smi's own view, by GPU index: uuid, memory.used MiB, temperature °C, power.draw W ("[N/A]" when none)."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not on PATH")
    command = ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout
    rows = [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]
    return {int(row[0]): row[1:] for row in rows}


def close_to(ours: float | None, theirs: str, tolerance: float) -> bool:
    if theirs.startswith("[") or theirs in ("N/A", ""):  # nvidia-smi has no value either: ours must be absent
        return ours is None
    return ours is not None and abs(ours - float(theirs)) <= tolerance


def test_the_nvml_probe_agrees_with_nvidia_smi(probe: NvmlProbe) -> None:
    inventory = probe.inventory()
    readings: list[Reading] = probe.read()
    smi = nvidia_smi()
    assert sorted(smi) == [r.device for r in readings] == [info.index for info in inventory]
    for reading, info in zip(readings, inventory, strict=True):
        uuid, memory_mib, temperature, power = smi[info.index]
        metrics = reading.metrics
        assert info.uuid == uuid and info.name and info.memory_total_bytes and info.driver_version
        assert not any(call in (reading.error or "") for call in METRIC_CALLS), reading.error
        assert set(metrics) >= {"gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_temperature_celsius"}
        assert reading.extra.get("gpu_sm_clock_mhz", 0) > 0 and "gpu_clocks_event_reasons" in reading.extra, reading
        assert 0.0 <= metrics["gpu_utilization_ratio"] <= 1.0
        used = metrics["gpu_memory_used_bytes"]
        # nvidia-smi rounds to MiB; 64 MiB allows for an allocation between the two reads, not for NVML v1's
        # reserved memory (~0.5 GiB on an H100), which would mean the wrong nvmlDeviceGetMemoryInfo version
        assert close_to(used / MIB, memory_mib, 64), (used / MIB, memory_mib)
        assert close_to(metrics.get("gpu_temperature_celsius"), temperature, 3), (metrics, temperature)
        # power moves within a second; watts, not milliwatts, is what this proves
        watts = metrics.get("gpu_power_watts")
        tolerance = max(25.0, 0.15 * float(power)) if power.replace(".", "").isdigit() else 0.0
        assert close_to(watts, power, tolerance), (watts, power)
