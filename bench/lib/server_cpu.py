"""Where the cores went while a benchmark loaded the server: the machine, the server and its workers, the load
generator, PostgreSQL, and the rest; and the server's resident memory. Two snapshots bound a window."""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class CpuUse:
    """Cores kept busy during the load: the machine, and its share by server, generator, database and the rest."""

    machine_cores: float
    server_cores: float
    generator_cores: float
    database_cores: float

    @property
    def other_cores(self) -> float:
        """Whatever else ran on the machine meanwhile (other jobs); near 0 for a clean measurement."""
        return self.machine_cores - self.server_cores - self.generator_cores - self.database_cores


@dataclass(frozen=True)
class CpuSnapshot:
    at: float
    machine_busy_s: float
    server_s: float
    database_s: dict[int, float]


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _tree(process: psutil.Process) -> list[psutil.Process]:
    """The server and its worker processes (``--workers``), those alive now."""
    try:
        return [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _process_seconds(process: psutil.Process) -> float:
    """CPU seconds of the server's processes (a worker that exited in between drops out: a restart, not a run)."""
    seconds = 0.0
    for member in _tree(process):
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        seconds += times.user + times.system
    return seconds


def tree_rss_bytes(process: psutil.Process) -> int:
    """Resident memory of the server and its workers together."""
    total = 0
    for member in _tree(process):
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def _database_seconds() -> dict[int, float]:
    """CPU seconds of each PostgreSQL process here, plus, on the postmaster, those of its backends that have
    exited (a pool's overflow connections come and go); none for SQLite, which runs inside the server."""
    seconds: dict[int, float] = {}
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in ("postgres", "postmaster"):
            with suppress(psutil.Error):
                times = process.cpu_times()
                seconds[process.pid] = times.user + times.system + times.children_user + times.children_system
    return seconds


def cpu_snapshot(server: psutil.Process) -> CpuSnapshot:
    return CpuSnapshot(time.perf_counter(), _busy_seconds(), _process_seconds(server), _database_seconds())


def cpu_use(before: CpuSnapshot, after: CpuSnapshot, generator_s: float) -> CpuUse:
    wall = after.at - before.at
    database_s = sum(s - before.database_s.get(pid, 0.0) for pid, s in after.database_s.items())
    return CpuUse(
        machine_cores=(after.machine_busy_s - before.machine_busy_s) / wall,
        server_cores=(after.server_s - before.server_s) / wall,
        generator_cores=generator_s / wall,
        database_cores=database_s / wall,
    )
