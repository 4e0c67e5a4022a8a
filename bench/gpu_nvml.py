"""The NVML probe against nvidia-smi on a real GPU: ``python -m bench.gpu_nvml [--quick] [--out DIR]``.

For 60 s (``--quick``: 15 s) the agent's ``NvmlProbe`` reads every GPU each 500 ms while ``nvidia-smi
--query-gpu=... -lms 500`` prints its own readings of the same counters; torch matmuls and copies load the first GPU
over the middle third, so that utilization, memory bandwidth, power and temperature move (idle, busy, idle again).
Each probe reading is paired with nvidia-smi's nearest row of the same GPU (at most 250 ms apart) and, for each of
the catalog's five GPU metrics (CONTRACT section 4), the absolute differences in nvidia-smi's unit are summarised
against a tolerance:

- ``gpu_utilization_ratio`` against ``utilization.gpu`` and ``gpu_memory_bandwidth_utilization_ratio`` against
  ``utilization.memory``: 10 percentage points (both read counters NVML averages over a 1/6 s to 1 s window, up to
  250 ms apart: near a load edge they see different windows);
- ``gpu_memory_used_bytes`` against ``memory.used`` (MiB): 64 MiB (the same nvmlMemory_v2 ``used``; allocations
  move it between reads);
- ``gpu_power_watts`` against ``power.draw``: max(25 W, 15 % of nvidia-smi's) (both the driver's 1-second average;
  under a load step it moves fast);
- ``gpu_temperature_celsius`` against ``temperature.gpu``: 3 °C (a 1 °C sensor, read up to 250 ms apart).

A metric holds when its median difference is within its tolerance and at least 90 % of the pairs are (a load edge
may put a few outside). The probe's cost is the wall time of one ``read_raw()`` of every GPU (p50, p99, max); it
holds at p99 ≤ 100 µs. The readings are written as a replay recording (``DIR/nvml_recording.jsonl``, the format of
``inference_agent/probes/fixtures/README.md``) with the phases marked. Without NVML or a GPU the last line is
``{"bench": "gpu_nvml", "skipped": REASON}`` and the exit status 0. Progress goes to stderr; the last stdout line is
JSON: the baseline is nvidia-smi, the ratio the worst metric's median difference over its tolerance.
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib.cuda import cuda_device_count
from bench.lib.progress import progress_line
from inference_agent.probes.base import ProbeUnavailable
from inference_agent.probes.nvml import METRIC_CONVERSIONS, NvmlProbe, RawGpuSample
from inference_agent.probes.replay import recording_lines
from wire.percentile import percentile

INTERVAL_S = 0.5
MAX_PAIR_GAP_S = 0.25
WITHIN_FRACTION = 0.9
READ_P99_TARGET_MS = 0.1  # one read of every GPU at 2 reads a second: 100 µs is 0.02 % of a core
MIB = 2**20


progress = progress_line("gpu_nvml")


@dataclass(frozen=True)
class Metric:
    """One catalog GPU metric against nvidia-smi: the field reading the same NVML counter, how many of that field's
    unit one catalog unit is (a ratio of 1 is 100 %, a byte 1/2²⁰ MiB), the tolerance of nvidia-smi's value."""

    name: str
    column: str
    smi_per_unit: float
    tolerance: Callable[[float], float]
    tolerance_text: str

    def from_raw(self, values: dict[str, int]) -> float | None:
        """The probe's raw NVML value in nvidia-smi's unit: 61_203_283_968 bytes → 58368 MiB; None when unread."""
        field, divisor = NVML_SOURCES[self.name]
        return None if field not in values else values[field] / divisor * self.smi_per_unit


NVML_SOURCES = {name: (field, divisor) for field, name, divisor in METRIC_CONVERSIONS}  # the probe's own conversion
METRICS = (
    Metric("gpu_utilization_ratio", "utilization.gpu", 100, lambda _: 10.0, "10 points"),
    Metric("gpu_memory_used_bytes", "memory.used", 1 / MIB, lambda _: 64.0, "64 MiB"),
    Metric("gpu_memory_bandwidth_utilization_ratio", "utilization.memory", 100, lambda _: 10.0, "10 points"),
    Metric("gpu_power_watts", "power.draw", 1, lambda w: max(25.0, 0.15 * w), "max(25 W, 15 %)"),
    Metric("gpu_temperature_celsius", "temperature.gpu", 1, lambda _: 3.0, "3 °C"),
)  # fmt: skip
SMI_FIELDS = ("timestamp", "index", *(m.column for m in METRICS))
SMI_COMMAND = (
    "nvidia-smi",
    f"--query-gpu={','.join(SMI_FIELDS)}",
    "--format=csv,noheader,nounits",
    "-lms",
    str(int(INTERVAL_S * 1000)),
)


@dataclass(frozen=True)
class SmiRow:
    """One nvidia-smi line: when (Unix seconds), which GPU, and its columns (None where it printed [N/A])."""

    at: float
    index: int
    values: dict[str, float | None]


def parse_smi_line(line: str, received_at: float) -> SmiRow | None:
    """``2026/12/03 07:09:06.123, 0, 37, 1024, 12, 112.53, 41`` → a row; None for a line that is not one (a header,
    a warning). nvidia-smi's timestamp is local time to the millisecond; ``received_at`` stands in when it is not."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != len(SMI_FIELDS) or not parts[1].isdigit():
        return None
    try:
        at = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        at = received_at
    values: dict[str, float | None] = {}
    for column, text in zip(SMI_FIELDS[2:], parts[2:], strict=True):
        try:
            values[column] = float(text)
        except ValueError:
            values[column] = None  # [N/A], [Not Supported]
    return SmiRow(at, int(parts[1]), values)


@dataclass(frozen=True)
class ProbeRead:
    at: float  # the read's midpoint, Unix seconds
    cost_s: float
    raws: list[RawGpuSample]


def pair(
    reads: Sequence[ProbeRead], rows: Sequence[SmiRow], max_gap_s: float = MAX_PAIR_GAP_S
) -> list[tuple[dict[str, int], SmiRow]]:
    """(probe values, nvidia-smi row) for every probe reading of a GPU with a row of that GPU within ``max_gap_s``."""
    by_gpu: dict[int, list[SmiRow]] = {}
    for row in sorted(rows, key=lambda r: r.at):
        by_gpu.setdefault(row.index, []).append(row)
    pairs = []
    for read in reads:
        for raw in read.raws:
            gpu_rows = by_gpu.get(raw.index, [])
            times = [r.at for r in gpu_rows]
            k = bisect.bisect_left(times, read.at)
            near = [gpu_rows[j] for j in (k - 1, k) if 0 <= j < len(gpu_rows)]
            best = min(near, key=lambda r: abs(r.at - read.at), default=None)
            if best is not None and abs(best.at - read.at) <= max_gap_s:
                pairs.append((raw.values, best))
    return pairs


def compare(pairs: Iterable[tuple[dict[str, int], SmiRow]]) -> dict[str, dict[str, Any]]:
    """Per metric: pairs compared, the median, p95 and max absolute difference in nvidia-smi's unit, the share within
    tolerance, held."""
    diffs: dict[str, list[tuple[float, float]]] = {m.name: [] for m in METRICS}
    for values, row in pairs:
        for metric in METRICS:
            ours, theirs = metric.from_raw(values), row.values.get(metric.column)
            if ours is not None and theirs is not None:
                diffs[metric.name].append((abs(ours - theirs), metric.tolerance(theirs)))
    summary: dict[str, dict[str, Any]] = {}
    for metric in METRICS:
        found = diffs[metric.name]
        if not found:
            summary[metric.name] = {"pairs": 0, "held": None, "why": "no pair had both values"}
            continue
        absolute = [d for d, _ in found]
        within = sum(d <= tol for d, tol in found) / len(found)
        median_tolerance = percentile([tol for _, tol in found], 50)
        summary[metric.name] = {
            "pairs": len(found),
            "median_diff": round(percentile(absolute, 50), 3),
            "p95_diff": round(percentile(absolute, 95), 3),
            "max_diff": round(max(absolute), 3),
            "tolerance": metric.tolerance_text,
            "median_over_tolerance": round(percentile(absolute, 50) / median_tolerance, 3),
            "within_tolerance": round(within, 3),
            "held": percentile(absolute, 50) <= median_tolerance and within >= WITHIN_FRACTION,
        }
    return summary


class NvidiaSmi:
    """``nvidia-smi --query-gpu ... -lms 500`` in the background, its rows gathered as they arrive."""

    def __init__(self) -> None:
        self.rows: list[SmiRow] = []
        self.ignored: list[str] = []
        self._process = subprocess.Popen(SMI_COMMAND, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, name="nvidia-smi", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            row = parse_smi_line(line, time.time())
            if row is not None:
                self.rows.append(row)
            elif line.strip() and len(self.ignored) < 5:
                self.ignored.append(line.strip())

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(5)


class GpuLoad:
    """fp16 matmuls (the SMs: utilization, power, temperature) and 1 GiB device-to-device copies (memory bandwidth)
    on cuda:0 in a thread, between ``start`` and ``stop``: the busy phase. Its 3 GiB move memory used too."""

    def __init__(self, size: int = 8192, copy_mib: int = 1024) -> None:
        self._stop = threading.Event()
        self._size, self._copy_mib = size, copy_mib
        self._thread = threading.Thread(target=self._run, name="gpu-load", daemon=True)
        self.seconds = 0.0

    def _run(self) -> None:
        import torch

        a = torch.randn(self._size, self._size, device="cuda:0", dtype=torch.float16)
        b = torch.randn(self._size, self._size, device="cuda:0", dtype=torch.float16)
        source = torch.rand(self._copy_mib * MIB // 4, device="cuda:0")
        target = torch.empty_like(source)
        begun = time.monotonic()
        while not self._stop.is_set():
            for _ in range(8):
                a = torch.matmul(a, b).clamp_(-1, 1)
                target.copy_(source)
            torch.cuda.synchronize()
        self.seconds = time.monotonic() - begun
        del a, b, source, target
        torch.cuda.empty_cache()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def sample(probe: NvmlProbe, seconds: float, *, load: GpuLoad | None) -> tuple[list[ProbeRead], dict[str, list[int]]]:
    """Read every ``INTERVAL_S`` for ``seconds``, the load on over the middle third; the reads and the phases (by
    read number) for the recording's meta."""
    count = int(seconds / INTERVAL_S)
    busy = range(count // 3, 2 * count // 3) if load is not None else range(0)
    reads: list[ProbeRead] = []
    start = time.monotonic()
    for number in range(count):
        if load is not None and number == busy.start:
            progress("load on (matmuls and copies on cuda:0)")
            load.start()
        if load is not None and number == busy.stop:
            load.stop()
            progress(f"load off after {load.seconds:.1f} s")
        time.sleep(max(0.0, start + number * INTERVAL_S - time.monotonic()))
        begun, wall = time.perf_counter(), time.time()
        raws = probe.read_raw()
        cost = time.perf_counter() - begun
        reads.append(ProbeRead(wall + cost / 2, cost, raws))
    phases = {"idle": [0, busy.start - 1], "load": [busy.start, busy.stop - 1], "after": [busy.stop, count - 1]}
    return reads, phases if busy else {"idle": [0, count - 1]}


def read_cost(costs_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99 and max of the reads' wall times (ms), and whether p99 is within ``READ_P99_TARGET_MS``."""
    p99 = percentile(costs_ms, 99)
    return {
        "p50": round(percentile(costs_ms, 50), 3),
        "p99": round(p99, 3),
        "max": round(max(costs_ms), 3),
        "p99_target": READ_P99_TARGET_MS,
        "held": p99 <= READ_P99_TARGET_MS,
    }


def run(
    seconds: float, out: Path | None, *, with_load: bool, open_probe: Callable[[], NvmlProbe] = NvmlProbe.open
) -> dict[str, Any]:
    try:
        probe = open_probe()
    except ProbeUnavailable as exc:
        return {"bench": "gpu_nvml", "skipped": f"the NVML probe cannot start: {exc}"}
    inventory = probe.inventory()
    progress(f"{len(inventory)} GPU(s): {', '.join(f'{g.index} {g.name}' for g in inventory)}")
    smi = NvidiaSmi() if shutil.which("nvidia-smi") else None
    load = GpuLoad() if with_load and cuda_device_count() else None
    try:
        reads, phases = sample(probe, seconds, load=load)
    finally:
        if smi is not None:
            smi.stop()
        probe.close()
    figures: dict[str, Any] = {
        "bench": "gpu_nvml",
        "gpus": [{"index": g.index, "name": g.name, "driver": g.driver_version} for g in inventory],
        "seconds": seconds,
        "reads": len(reads),
        "read_cost_ms": read_cost([r.cost_s * 1000 for r in reads]),
        "read_errors": sorted({e for r in reads for raw in r.raws for e in raw.errors})[:10],
        "load": "fp16 8192² matmuls and 1 GiB copies on cuda:0, middle third" if load is not None else None,
        "baseline": "nvidia-smi --query-gpu -lms 500",
    }
    if smi is None:
        figures["metrics"] = None
        figures["why_not_compared"] = "no nvidia-smi on PATH"
    else:
        pairs = pair(reads, smi.rows)
        summary = compare(pairs)
        figures.update(smi_rows=len(smi.rows), pairs=len(pairs), smi_lines_ignored=smi.ignored, metrics=summary)
        held = [s["held"] for s in summary.values() if s["held"] is not None]
        figures["ratio"] = max((s["median_over_tolerance"] for s in summary.values() if s["pairs"]), default=None)
        figures["target_met"] = bool(held) and all(held) and figures["read_cost_ms"]["held"]
    if out is not None:
        path = out / "nvml_recording.jsonl"
        name = inventory[0].name if inventory else "?"
        note = f"recorded by bench.gpu_nvml on {name} (driver {inventory[0].driver_version}), {datetime.now(UTC):%F}"
        meta = {"synthetic": False, "interval_s": INTERVAL_S, "phases": phases, "note": note}
        path.write_text("".join(recording_lines(inventory, [r.raws for r in reads], meta)))
        figures["recording"] = str(path)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_nvml", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 s instead of 60")
    parser.add_argument("--seconds", type=float, help="how long to sample (default 60, --quick 15)")
    parser.add_argument("--out", type=Path, help="write the readings as a replay recording into this folder")
    parser.add_argument("--no-load", action="store_true", help="no GPU load in the middle third")
    args = parser.parse_args(argv)
    seconds = args.seconds or (15.0 if args.quick else 60.0)
    if seconds < 3 * INTERVAL_S * 2:
        parser.error(f"--seconds {seconds:g}: at least {3 * INTERVAL_S * 2:g} s, for an idle, a busy and an idle phase")
    print(json.dumps(run(seconds, args.out, with_load=not args.no_load)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
