"""MpsControl against the in-repo fake control daemon (a real subprocess per command, as with the real tool)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference_agent.isolation.limits import ReplicaLimits
from inference_agent.isolation.mps import ClientLimitReached, MpsControl, MpsError
from inference_agent.serving.supervision.quota import GpuQuota, replica_environment

FAKE = Path(__file__).resolve().parents[3] / "scripts" / "fake-nvidia-cuda-mps-control"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "mps-commands.log"


def control(log: Path, **kwargs: object) -> MpsControl:
    return MpsControl(binary=str(FAKE), uid=1000, environ={**os.environ, "FAKE_MPS_LOG": str(log)}, **kwargs)  # type: ignore[arg-type]


def commands(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def replica() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in replica started as the supervisor starts one: with its MPS quota in the environment (40%, 2 GiB)."""
    env = replica_environment(slot=0, slots=1, cpus=(0,), device="cuda", mps=True, gpu_quota=GpuQuota(40, 2048))
    process = subprocess.Popen(["sleep", "30"], env=env)
    yield process
    process.kill()
    process.wait()


def test_the_first_replica_starts_the_server_and_sets_its_share(log: Path, replica: subprocess.Popen[bytes]) -> None:
    mps = control(log)
    result = mps.apply("r1", replica.pid, ReplicaLimits(device=0, active_thread_percentage=40, pinned_memory_mib=2048))
    assert commands(log) == [
        "set_default_active_thread_percentage 40",
        "get_server_list",
        "start_server -uid 1000",
        "get_server_list",
        "set_active_thread_percentage 40001 40",
        "set_default_device_pinned_mem_limit 0 2048M",
        "set_device_pinned_mem_limit 40001 0 2048M",
        "get_server_list",  # verify: the server allows at least 40%
        "get_active_thread_percentage 40001",
    ]
    assert result.complete, result.describe()
    assert result.applied == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M",
        "mps_server": "server 40001 allows 40%",
    }


def test_the_server_allows_the_largest_share_so_that_each_clients_own_holds(
    log: Path, replica: subprocess.Popen[bytes]
) -> None:
    mps = control(log, read_environment=lambda _pid: {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "70"})
    mps.apply("big", 1, ReplicaLimits(active_thread_percentage=70))
    log.unlink()
    mps.apply("small", 2, ReplicaLimits(active_thread_percentage=30))
    assert "set_active_thread_percentage 40001 70" in commands(log)  # not 30: that would hold "big" to 30%
    assert mps.active_thread_percentage(40001) == 70.0


def test_a_running_replica_with_other_limits_is_reported_not_applied(
    log: Path, replica: subprocess.Popen[bytes]
) -> None:
    result = control(log).apply("r1", replica.pid, ReplicaLimits(active_thread_percentage=60))
    assert result.applied == {"mps_server": "server 40001 allows 60%"}
    assert (
        "started with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40, not 60"
        in result.not_applied["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]
    )
    assert "replacement" in result.describe()


def test_the_49th_client_of_a_device_is_refused_before_anything_is_sent(log: Path) -> None:
    mps = control(log, read_environment=lambda _pid: {})
    for i in range(48):
        mps.apply(f"r{i}", 1000 + i, ReplicaLimits(device=1))  # no GPU limit: nothing for the daemon, still a client
    assert commands(log) == []
    with pytest.raises(ClientLimitReached, match=r"device 1 already has 48 MPS clients.*client number 49"):
        mps.apply("r48", 2000, ReplicaLimits(device=1, active_thread_percentage=10))
    assert commands(log) == []
    mps.apply("r0", 1000, ReplicaLimits(device=1))  # applying again to a client it has is no new client
    mps.apply("other", 3000, ReplicaLimits(device=0))  # another device has room
    mps.release("r5")
    mps.apply("r48", 2000, ReplicaLimits(device=1))  # a slot freed


def test_a_missing_control_binary_is_an_mps_error(tmp_path: Path) -> None:
    mps = MpsControl(binary=str(tmp_path / "nvidia-cuda-mps-control"))
    with pytest.raises(MpsError, match="not found"):
        mps.apply("r1", 1, ReplicaLimits(active_thread_percentage=50))
