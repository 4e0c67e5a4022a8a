"""Generate the synthetic H100 recording (idle -> load -> busy -> throttled) from NVML's documented ranges.

Usage: python scripts/make_nvml_fixture.py inference_agent/probes/fixtures/nvml_h100_recording.jsonl
"""

from __future__ import annotations

import json
import random
import sys

from inference_agent.probes.base import GpuInfo
from inference_agent.probes.nvml import RawField as F
from inference_agent.probes.nvml import RawGpuSample
from inference_agent.probes.replay import inventory_record, sample_record

MiB = 1 << 20
TOTAL = 85_520_809_984  # H100 80GB HBM3: 81559 MiB
RESERVED = 551 * MiB
LIMIT_MW = 700_000  # H100 SXM5 TDP
SAMPLES = 160  # 80 s at 500 ms
rng = random.Random(20251130)


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def phase(n: int) -> str:
    if n < 30:
        return "idle"
    if n < 50:
        return "load"
    if n < 120:
        return "busy"
    return "throttled"


def values(n: int, gpu: int, state: dict[str, int]) -> dict[F, int]:
    p = phase(n)

    def j(a: int) -> int:
        return rng.randint(-a, a)

    if p == "idle":
        util, mutil, used = 0, 0, 1 * MiB
        power = 69_000 + gpu * 2_500 + j(1500)
        temp = 31 + gpu + j(1)
        sm = 345
        reasons = 0x1
        procs = 0
    elif p == "load":
        k = (n - 30 + 1) / 20
        util, mutil = clamp(5 + j(4) + int(20 * k), 0, 100), clamp(10 + int(30 * k) + j(3), 0, 100)
        used = int(1 * MiB + k * 72_000 * MiB) + j(8) * MiB
        power = 110_000 + int(90_000 * k) + j(6000)
        temp = 33 + gpu + int(10 * k) + j(1)
        sm = 1980
        reasons = 0x0
        procs = 1
    elif p == "busy":
        k = (n - 50) / 70
        util, mutil = clamp(94 + j(6), 0, 100), clamp(58 + j(14), 0, 100)
        used = 72_000 * MiB + 1 * MiB + rng.randint(0, 900) * MiB
        power = 480_000 + int(170_000 * k) + j(25_000)
        temp = 48 + gpu + int(30 * k) + j(1)
        sm = 1980
        reasons = 0x0
        procs = 1
        if power > 680_000:
            reasons = 0x4
    else:
        util, mutil = 100, clamp(66 + j(8), 0, 100)
        used = 72_000 * MiB + 1 * MiB + rng.randint(600, 1200) * MiB
        power = LIMIT_MW - rng.randint(0, 9_000)
        temp = 84 + gpu + (n - 120) // 12 + j(1)
        reasons = 0x4 | (0x20 if temp >= 87 else 0)
        sm = 1755 - 15 * (temp - 84) - rng.randint(0, 6) * 15
        procs = 1
        if gpu == 1 and n % 10 == 0:
            state["ecc"] += 1
            state["replay"] += 1
    return {
        F.UTILIZATION_GPU: util,
        F.UTILIZATION_MEMORY: mutil,
        F.MEMORY_USED: used,
        F.MEMORY_RESERVED: RESERVED,
        F.POWER_USAGE: power,
        F.TEMPERATURE_GPU: temp,
        F.ECC_VOLATILE_CORRECTED: state["ecc"],
        F.ECC_VOLATILE_UNCORRECTED: 0,
        F.CLOCK_SM: sm,
        F.CLOCK_MEM: 2619,
        F.CLOCKS_EVENT_REASONS: reasons,
        F.PCIE_REPLAY_COUNTER: state["replay"],
        F.ENFORCED_POWER_LIMIT: LIMIT_MW,
        F.COMPUTE_PROCESSES: procs,
    }


def main(out: str) -> None:
    lines: list[dict[str, object]] = [
        {
            "kind": "meta",
            "synthetic": True,
            "interval_s": 0.5,
            "phases": {"idle": [0, 29], "load": [30, 49], "busy": [50, 119], "throttled": [120, 159]},
            "note": (
                "Synthetic: built from NVML's documented value ranges and an H100 SXM5 80GB profile, not measured. "
                "Replace with a real recording (see README.md)."
            ),
        }
    ]
    uuids = ["GPU-3b8f6d2a-91c4-4e57-b0a8-6c2d1f9e4a13", "GPU-c71e0a94-5d38-4b2f-9e61-0f4a8b3d7c25"]
    for i, u in enumerate(uuids):
        lines.append(inventory_record(GpuInfo(i, "NVIDIA H100 80GB HBM3", u, TOTAL, "550.90.07")))
    states = [{"ecc": 0, "replay": 0}, {"ecc": 1, "replay": 3}]
    for n in range(SAMPLES):
        for g in range(2):
            lines.append(sample_record(n, RawGpuSample(g, {str(k): v for k, v in values(n, g, states[g]).items()})))
    with open(out, "w") as f:
        for rec in lines:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
