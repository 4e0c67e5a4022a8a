"""Record real NVML readings for the replay probe, on a node with a GPU (``bench.gpu_nvml`` records one too, under
load, while it checks the probe against nvidia-smi).

Usage: python scripts/record_nvml.py OUT.jsonl [--samples 160] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

from inference_agent.probes.nvml import NvmlProbe, RawGpuSample
from inference_agent.probes.replay import recording_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--samples", type=int, default=160)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    probe = NvmlProbe.open()
    inventory = probe.inventory()
    samples: list[list[RawGpuSample]] = []
    for _ in range(args.samples):
        samples.append(probe.read_raw())
        time.sleep(args.interval)
    probe.close()
    model = inventory[0].name if inventory else "no GPU"
    driver = inventory[0].driver_version if inventory else "?"
    note = f"recorded on {model} (driver {driver}), {datetime.now(UTC):%Y-%m-%d}"
    meta = {"synthetic": False, "interval_s": args.interval, "note": note}
    args.out.write_text("".join(recording_lines(inventory, samples, meta)))


if __name__ == "__main__":
    main()
