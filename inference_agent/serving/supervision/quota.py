"""Each replica's quota environment, as a pure function of its slot and its pool's settings.

On CPU a replica gets a share of the node's cores (``FLEETPILOT_REPLICA_CPUS``, applied with ``sched_setaffinity``
by the replica itself) and as many torch threads (``FLEETPILOT_REPLICA_THREADS``). With a GPU and an MPS daemon it
gets ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, which the CUDA driver reads
when the replica opens its context. Worked: 4 cores, 2 replica slots → slot 0 on cores 0,1 and slot 1 on 2,3,
2 threads each; 2 cores and 3 slots → one core each, slot 2 sharing core 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CPUS_ENV = "FLEETPILOT_REPLICA_CPUS"
THREADS_ENV = "FLEETPILOT_REPLICA_THREADS"
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class GpuQuota:
    """A pool's share of a GPU under MPS; None leaves the MPS default (all SMs, no memory cap)."""

    active_thread_percentage: int | None = None
    gpu_memory_mib: int | None = None


def cpu_share(slot: int, slots: int, cpus: tuple[int, ...]) -> tuple[int, ...]:
    """The cores of replica ``slot`` when ``slots`` replicas share ``cpus``: contiguous equal shares, at least one."""
    if not cpus:
        raise ValueError("no CPUs to share")
    per_slot = max(1, len(cpus) // max(1, slots))
    start = slot * per_slot
    return tuple(cpus[(start + k) % len(cpus)] for k in range(per_slot))


def replica_environment(
    *,
    slot: int,
    slots: int,
    cpus: tuple[int, ...],
    device: str,
    mps: bool,
    gpu_quota: GpuQuota = GpuQuota(),
) -> dict[str, str]:
    """The environment variables a replica starts with (added to the agent's own environment)."""
    share = cpu_share(slot, slots, cpus)
    env = {CPUS_ENV: ",".join(map(str, share)), THREADS_ENV: str(len(share))}
    if device.startswith("cuda") and mps:
        if gpu_quota.active_thread_percentage is not None:
            env[MPS_THREADS_ENV] = str(gpu_quota.active_thread_percentage)
        if gpu_quota.gpu_memory_mib is not None:
            # the limit is per device index as the replica sees it: it uses its first visible device
            env[MPS_MEMORY_ENV] = f"0={gpu_quota.gpu_memory_mib}M"
    return env


def gpu_memory_fraction(memory_mib: int | None, totals_mib: list[int | None], default: float) -> float:
    """What an engine's ``--gpu-memory-utilization`` should be: the pool's GPU memory over the smallest assigned
    GPU's (40,960 MiB of an 81,559 MiB H100 → 0.502), at most 1; ``default`` when either is unknown."""
    known = [t for t in totals_mib if t]
    if memory_mib is None or not known:
        return default
    return min(1.0, memory_mib / min(known))


def parse_cpus(text: str) -> set[int]:
    """``"0,1,4"`` → {0, 1, 4}."""
    return {int(part) for part in text.split(",") if part.strip()}


def mps_daemon_running(environ: dict[str, str], exists: Callable[[str], bool]) -> bool:
    """Whether CUDA clients here would join an MPS daemon: its pipe directory (default /tmp/nvidia-mps) has a control
    pipe."""
    pipe_dir = environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return exists(f"{pipe_dir}/control")
