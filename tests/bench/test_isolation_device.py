"""``bench.isolation --device``: what the agent is started with on each device, and ``--device cuda`` without a GPU
answering why it skipped (the CPU run is the benchmark's own, quoted in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench.isolation import Device


def test_on_cuda_the_agent_reports_its_gpus_and_joins_the_daemon_it_is_given() -> None:
    mps = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps-x/pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/mps-x/log"}
    device = Device("cuda", mps)
    assert device.gpu_probe == "nvml"
    assert device.agent_env() == {"FLEETPILOT_REPLICA_DEVICE": "cuda", **mps}
    assert Device("cpu").gpu_probe == "none" and Device("cpu").agent_env() == {"FLEETPILOT_REPLICA_DEVICE": "cpu"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the bench runs for real (scripts/gpu-check.sh)")
def test_cuda_without_a_gpu_says_why_it_skipped_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.isolation", "--device", "cuda", "--quick"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer == {"bench": "isolation", "skipped": "--device cuda: torch sees no CUDA device"}
