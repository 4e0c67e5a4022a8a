"""MpsControl against the real ``nvidia-cuda-mps-control`` (run by ``scripts/gpu-check.sh`` where a GPU is lent).

A private MPS daemon (its own pipe and log directories) is started for the test and quit after it, so a daemon the
machine already runs is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference_agent.isolation.limits import ReplicaLimits
from inference_agent.isolation.mps import CONTROL_BINARY, MpsControl
from inference_agent.serving.supervision.quota import GpuQuota, replica_environment

pytestmark = pytest.mark.gpu


@pytest.fixture
def daemon() -> Iterator[dict[str, str]]:
    binary = shutil.which(CONTROL_BINARY)
    if binary is None:
        pytest.skip(f"no {CONTROL_BINARY} on this machine")
    base = Path(tempfile.mkdtemp(prefix="mps-"))  # short: the pipe directory holds Unix sockets (108-byte paths)
    environ = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(base / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(base / "log")}
    for name in ("pipe", "log"):
        (base / name).mkdir()
    subprocess.run([binary, "-d"], env=environ, check=True, timeout=30)
    yield environ
    subprocess.run([binary], input="quit\n", text=True, env=environ, timeout=30, check=False)
    print((base / "log" / "control.log").read_text() if (base / "log" / "control.log").exists() else "(no log)")
    shutil.rmtree(base, ignore_errors=True)


def test_a_thread_percentage_applied_through_the_daemon_reads_back(daemon: dict[str, str]) -> None:
    quota = replica_environment(slot=0, slots=1, cpus=(0,), device="cuda", mps=True, gpu_quota=GpuQuota(40, 1024))
    replica = subprocess.Popen(["sleep", "60"], env={**daemon, **quota})
    try:
        mps = MpsControl(environ=daemon)
        result = mps.apply(
            "r1", replica.pid, ReplicaLimits(device=0, active_thread_percentage=40, pinned_memory_mib=1024)
        )
        [server] = mps.servers()
        print(result.describe())
        assert mps.active_thread_percentage(server) == 40.0
        assert result.complete, result.describe()
    finally:
        replica.kill()
        replica.wait()
