"""Applying a replica's limits on the node: one narrow Protocol, the limits it takes and the outcome it reports.

Implementations: ``MpsControl`` (GPU share and pinned memory through NVIDIA MPS, ``mps.py``) and ``CpuLimits`` (CPU
affinity, and a CPU cap through cgroup v2 ``cpu.max`` or cgroup v1 ``cpu.cfs_quota_us``, ``cpu.py``). An
implementation never pretends: a limit it could not apply is reported under ``not_applied`` with the reason, and
``verify`` reads back what actually holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


class IsolationError(Exception):
    """Applying limits failed in a way the caller must handle (a limit that merely did not apply is not an error)."""


@dataclass(frozen=True)
class ReplicaLimits:
    """One replica's limits as the node applies them (the node's side of ``isolation.planning.ReplicaLimits``).

    None leaves a limit unset. ``device`` is the GPU index as the node (and its MPS daemon) numbers it.
    """

    device: int | None = None
    active_thread_percentage: int | None = None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1..100
    pinned_memory_mib: int | None = None  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
    cpus: tuple[int, ...] | None = None  # CPU affinity
    cpu_millicores: int | None = None  # CPU cap: 1500 → cpu.max "150000 100000" (v1: the same quota and period)

    def __post_init__(self) -> None:
        pct = self.active_thread_percentage
        if pct is not None and not 1 <= pct <= 100:
            raise ValueError(f"active_thread_percentage: 1..100, not {pct}")
        for name in ("pinned_memory_mib", "cpu_millicores"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: a positive integer, not {value}")
        if self.cpus is not None and not self.cpus:
            raise ValueError("cpus: at least one CPU, or None")
        if self.device is not None and self.device < 0:
            raise ValueError(f"device: an index >= 0, not {self.device}")


@dataclass(frozen=True)
class AppliedLimits:
    """What holds for one replica: ``applied`` maps a limit to its value as set, ``not_applied`` to why not."""

    replica_id: str
    pid: int
    applied: Mapping[str, str] = field(default_factory=dict)
    not_applied: Mapping[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.not_applied

    def describe(self) -> str:
        """One line for the log: ``cpus: 0,1; cpu.max: not applied: /sys/fs/cgroup/x is not writable``."""
        parts = [f"{name}: {value}" for name, value in self.applied.items()]
        parts += [f"{name}: not applied: {why}" for name, why in self.not_applied.items()]
        return "; ".join(parts) or "no limits"


class LimitApplier(Protocol):
    def apply(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        """Apply ``limits`` to the running replica ``pid`` and say what holds."""
        ...

    def verify(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        """Read back what holds for the replica, without changing anything."""
        ...

    def release(self, replica_id: str) -> None:
        """The replica is gone: forget it (its MPS client slot, its cgroup)."""
        ...


def needs_replacement(old: ReplicaLimits, new: ReplicaLimits) -> bool:
    """Whether going from ``old`` to ``new`` takes a replacement replica rather than a change in place.

    An MPS client's thread percentage and pinned memory limit are fixed when it creates its CUDA context: neither the
    control daemon's commands nor the environment reach a running client, so any change of them (up, or down, or a
    limit added or removed) is made by starting a replacement with the new environment and draining the old one.
    CPU affinity and ``cpu.max`` change in place; a move to another device is a new replica anyway.
    """
    return (
        old.device != new.device
        or old.active_thread_percentage != new.active_thread_percentage
        or old.pinned_memory_mib != new.pinned_memory_mib
    )
