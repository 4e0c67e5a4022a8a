#!/usr/bin/env bash
# The GPU checks, as ONE script for a lent GPU machine (the `device` tool): nvidia-smi, the tests marked `gpu`
# (NVML readings compared with nvidia-smi), and a real NVML recording for the replay probe. Results land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-check-out}"
mkdir -p "$OUT"

nvidia-smi | tee "$OUT/nvidia-smi.txt"
python3 -m venv .venv-gpu
.venv-gpu/bin/pip install -q --upgrade pip
.venv-gpu/bin/pip install -q -e '.[server,agent,dev]'
.venv-gpu/bin/pytest -m gpu -v -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.txt"
.venv-gpu/bin/python scripts/record_nvml.py "$OUT/nvml_recording.jsonl" --samples 160 --interval 0.5
echo "recording: $OUT/nvml_recording.jsonl ($(wc -l < "$OUT/nvml_recording.jsonl") lines)"

# MPS: a private daemon, a thread percentage applied through MpsControl and read back with
# get_active_thread_percentage, then the daemon quit (tests/inference_agent/isolation/test_mps_gpu.py).
if command -v nvidia-cuda-mps-control >/dev/null; then
  .venv-gpu/bin/pytest -v -s -p no:cacheprovider tests/inference_agent/isolation/test_mps_gpu.py 2>&1 | tee "$OUT/mps-check.txt"
else
  echo "no nvidia-cuda-mps-control on this machine: MPS check skipped" | tee "$OUT/mps-check.txt"
fi
