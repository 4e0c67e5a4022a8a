"""The host probe: the node's network throughput, and host health extras for the failure-prediction rules.

Each read takes the host's counters (NICs, disks, CPU times) and compares them with the previous read's, so the
rates are over the interval between two reads; the first read has nothing to compare with and leaves them absent,
never a made-up zero. The arithmetic is ``interval_figures``, pure; ``HostProbe`` only gathers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from inference_agent.probes.base import Reading

_LOOPBACK = re.compile(r"lo\d*")  # Linux "lo", BSD/macOS "lo0"
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")  # guest time is inside user
_NIC_FIELDS = ("bytes_sent", "bytes_recv", "packets_sent", "packets_recv", "errin", "errout", "dropin", "dropout")


class _NicIo(Protocol):
    @property
    def bytes_sent(self) -> int: ...
    @property
    def bytes_recv(self) -> int: ...
    @property
    def packets_sent(self) -> int: ...
    @property
    def packets_recv(self) -> int: ...
    @property
    def errin(self) -> int: ...
    @property
    def errout(self) -> int: ...
    @property
    def dropin(self) -> int: ...
    @property
    def dropout(self) -> int: ...


class _DiskIo(Protocol):
    @property
    def read_count(self) -> int: ...
    @property
    def write_count(self) -> int: ...
    @property
    def read_time(self) -> int: ...  # ms spent reading
    @property
    def write_time(self) -> int: ...


class PsutilApi(Protocol):
    """The part of psutil this probe calls (the ``psutil`` module itself, or a stand-in in tests)."""

    def net_io_counters(self, pernic: Literal[True]) -> Mapping[str, _NicIo]: ...
    def disk_io_counters(self) -> _DiskIo | None: ...
    def cpu_times(self) -> Any: ...
    def virtual_memory(self) -> Any: ...
    def disk_usage(self, path: str) -> Any: ...


@dataclass(frozen=True)
class HostCounters:
    """The host's cumulative counters at one moment; a group is None when it could not be read."""

    at: float
    nics: dict[str, tuple[int, ...]] | None  # per non-loopback NIC, the values of _NIC_FIELDS
    disk_ops: int | None = None  # reads + writes
    disk_busy_ms: int | None = None  # read_time + write_time
    cpu_busy_s: float | None = None
    cpu_total_s: float | None = None


def interval_figures(previous: HostCounters, current: HostCounters) -> tuple[dict[str, float], dict[str, float]]:
    """The metrics and extras over the interval between two readings of the counters."""
    elapsed = current.at - previous.at
    metrics: dict[str, float] = {}
    extra: dict[str, float] = {}
    if elapsed <= 0:
        return metrics, extra
    nic = _nic_deltas(previous.nics, current.nics)
    if nic is not None:
        # (3 MB received + 1 MB sent) over 0.5 s → 8 MB/s
        metrics["network_throughput_bytes_per_second"] = (nic["bytes_recv"] + nic["bytes_sent"]) / elapsed
        extra |= _nic_health(nic)
    ops, busy_ms = _delta(previous.disk_ops, current.disk_ops), _delta(previous.disk_busy_ms, current.disk_busy_ms)
    if ops is not None and busy_ms is not None and ops > 0 and busy_ms >= 0:
        # 30 ms busy over 12 ops → 2.5 ms per op; no I/O in the interval → absent, not 0 ms
        extra["host_disk_io_latency_ms"] = busy_ms / ops
    busy_s, total_s = _delta(previous.cpu_busy_s, current.cpu_busy_s), _delta(previous.cpu_total_s, current.cpu_total_s)
    if busy_s is not None and total_s is not None and total_s > 0:
        extra["host_cpu_ratio"] = busy_s / total_s  # 1.5 busy CPU-seconds of 2.0 (all cores) → 0.75
    return metrics, extra


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _nic_deltas(
    previous: Mapping[str, tuple[int, ...]] | None, current: Mapping[str, tuple[int, ...]] | None
) -> dict[str, int] | None:
    """Summed counter increases of the NICs present in both readings, None when no NIC could be compared.

    A NIC that just appeared has no baseline, and one whose counters went back (driver reload) cannot be measured
    over this interval: both are left out rather than counted as zero traffic.
    """
    if previous is None or current is None:
        return None
    totals = dict.fromkeys(_NIC_FIELDS, 0)
    compared = 0
    for name, now in current.items():
        before = previous.get(name)
        deltas = [] if before is None else [a - b for a, b in zip(now, before, strict=True)]
        if not deltas or min(deltas) < 0:
            continue
        compared += 1
        for field_name, delta in zip(_NIC_FIELDS, deltas, strict=True):
            totals[field_name] += delta
    return totals if compared else None


def _nic_health(nic: Mapping[str, int]) -> dict[str, float]:
    drops = nic["dropin"] + nic["dropout"]
    # Linux counts a dropped packet in drop* and not in packets_*: 5 dropped beside 995 carried → 5 / 1000 = 0.005
    offered = nic["packets_recv"] + nic["packets_sent"] + drops
    extra: dict[str, float] = {
        "host_nic_errors_in": nic["errin"],
        "host_nic_errors_out": nic["errout"],
        "host_nic_drops_in": nic["dropin"],
        "host_nic_drops_out": nic["dropout"],
    }
    if offered > 0:
        extra["host_nic_packet_loss_ratio"] = drops / offered
    return extra


class HostProbe:
    """One node-level reading per tick: network throughput, and CPU, memory, disk and NIC health as extras."""

    name = "host"

    def __init__(
        self,
        data_dir: str | Path,
        *,
        psutil: PsutilApi | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``data_dir`` is the agent's data directory (its disk usage is reported); psutil and the clock inject."""
        if psutil is None:
            import psutil as psutil_module

            psutil = psutil_module
        self._psutil: PsutilApi = psutil
        self._data_dir = str(data_dir)
        self._clock = clock
        self._previous: HostCounters | None = None

    def read(self) -> list[Reading]:
        errors: list[str] = []
        counters = self._counters(errors)
        metrics, extra = ({}, {}) if self._previous is None else interval_figures(self._previous, counters)
        self._previous = counters
        gauges = self._gauges(errors)
        return [Reading(metrics=metrics, extra={**extra, **gauges}, error="; ".join(errors) or None)]

    def close(self) -> None:
        """Nothing to release."""

    def _counters(self, errors: list[str]) -> HostCounters:
        at = self._clock()
        nics = self._attempt("net_io_counters", errors, self._nics)
        disk = self._attempt("disk_io_counters", errors, self._psutil.disk_io_counters)
        cpu = self._attempt("cpu_times", errors, self._cpu)
        return HostCounters(
            at=at,
            nics=nics,
            disk_ops=None if disk is None else disk.read_count + disk.write_count,
            disk_busy_ms=None if disk is None else disk.read_time + disk.write_time,
            cpu_busy_s=None if cpu is None else cpu[0],
            cpu_total_s=None if cpu is None else cpu[1],
        )

    def _nics(self) -> dict[str, tuple[int, ...]]:
        counters = self._psutil.net_io_counters(pernic=True)
        return {
            name: tuple(getattr(nic, f) for f in _NIC_FIELDS)
            for name, nic in counters.items()
            if not _LOOPBACK.fullmatch(name)
        }

    def _cpu(self) -> tuple[float, float]:
        """(busy, total) CPU-seconds since boot, as psutil.cpu_percent counts them: idle and iowait are not busy."""
        times = self._psutil.cpu_times()
        total = sum(getattr(times, f, 0.0) for f in _CPU_FIELDS)
        return total - times.idle - getattr(times, "iowait", 0.0), total

    def _gauges(self, errors: list[str]) -> dict[str, float]:
        gauges: dict[str, float] = {}
        memory = self._attempt("virtual_memory", errors, self._psutil.virtual_memory)
        if memory is not None:
            gauges["host_memory_used_bytes"] = memory.used
            gauges["host_memory_total_bytes"] = memory.total
        usage = self._attempt("disk_usage", errors, lambda: self._psutil.disk_usage(self._data_dir))
        if usage is not None and usage.used + usage.free > 0:
            # as df counts it, leaving out root's reserved blocks: 40 GB used, 60 GB free → 0.4
            gauges["host_data_disk_usage_ratio"] = usage.used / (usage.used + usage.free)
        return gauges

    @staticmethod
    def _attempt(function: str, errors: list[str], call: Callable[[], Any]) -> Any:
        """``call()``, or None with an error line: psutil raises OSError and its own psutil.Error tree."""
        try:
            return call()
        except Exception as exc:  # the probe boundary: one failing counter must not stop the others
            errors.append(f"psutil.{function}: {exc}")
            return None
