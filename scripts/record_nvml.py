"""Record real NVML readings for the replay probe, on a node with a GPU (run by scripts/gpu-check.sh).

Usage: python scripts/record_nvml.py OUT.jsonl [--samples 160] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from inference_agent.probes.nvml import NvmlProbe
from inference_agent.probes.replay import inventory_record, sample_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--samples", type=int, default=160)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    probe = NvmlProbe.open()
    inventory = probe.inventory()
    model = inventory[0].name if inventory else "no GPU"
    records: list[dict[str, object]] = [
        {
            "kind": "meta",
            "synthetic": False,
            "interval_s": args.interval,
            "note": f"recorded on {model} ({inventory[0].driver_version if inventory else '?'}), "
            f"{datetime.now(UTC):%Y-%m-%d}",
        }
    ]
    records += [inventory_record(info) for info in inventory]
    for n in range(args.samples):
        records += [sample_record(n, raw) for raw in probe.read_raw()]
        time.sleep(args.interval)
    probe.close()
    with open(args.out, "w") as out:
        out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


if __name__ == "__main__":
    main()
