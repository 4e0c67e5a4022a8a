"""What a probe returns, and the narrow Protocols every probe implements.

A reading holds only what was measured: a metric the probe could not read is missing from ``metrics`` (absent on
the wire, never a made-up zero), and the reason goes to ``error`` and the agent's own ``/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class GpuInfo:
    """Inventory of one GPU, sent to the collector when the agent registers."""

    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    driver_version: str | None = None


@dataclass(frozen=True)
class Reading:
    """One probe's measurement of one series: a GPU (``device``), the node, or a pool replica (``pool``)."""

    metrics: dict[str, float]
    device: int | None = None
    pool: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class GpuProbe(Protocol):
    """Per-GPU readings: NVML on a real node, a replay of recorded readings in tests and benchmarks."""

    name: str

    def inventory(self) -> list[GpuInfo]: ...

    def read(self) -> list[Reading]: ...

    def close(self) -> None: ...


class Probe(Protocol):
    """Node or engine readings taken once per tick (host counters, an engine's latest scrape)."""

    name: str

    def read(self) -> list[Reading]: ...

    def close(self) -> None: ...


class ProbeUnavailable(Exception):
    """The probe cannot run on this machine (no GPU, no driver); the message says why."""
