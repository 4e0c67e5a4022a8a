"""One running agent read at one moment: its CPU seconds so far and its own ``/metrics``.

Two snapshots bound a window; ``bench.agent_overhead`` and ``bench.agent_e2e`` both take them, so both measure the
agent's CPU share the same way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from fleetpilot.launch import AgentProcess


@dataclass(frozen=True)
class Snapshot:
    """One agent at one moment: its CPU seconds so far, clocks around the ``/metrics`` scrape, and what it said.

    A tick between ``wall_before_s`` and ``wall_after_s`` may or may not be in the scrape, so a window starts at the
    first snapshot's ``wall_after_s`` and ends at the last one's ``wall_before_s``: its samples and ticks then agree.
    ``replicas_cpu_s`` is apart from ``cpu_s``: what the agent's live child processes (its replicas) have used.
    """

    cpu_s: float
    replicas_cpu_s: float
    monotonic_s: float
    wall_before_s: float
    wall_after_s: float
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.get((name, tuple(sorted(labels.items()))), math.nan)


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds of the process and of any children it has waited for."""
    times = process.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def live_children_cpu_seconds(process: psutil.Process) -> float:
    """``cpu_seconds`` of every descendant alive now; one that exits between two reads drops out of the later one."""
    seconds = 0.0
    for child in process.children(recursive=True):
        try:
            seconds += cpu_seconds(child)
        except psutil.NoSuchProcess:
            continue
    return seconds


def snapshot(agent: AgentProcess) -> Snapshot:
    """Read the agent's CPU (itself, then its replicas) and scrape its ``/metrics``; an agent that died is an error."""
    assert agent.process is not None
    if agent.process.poll() is not None:
        raise RuntimeError(f"agent {agent.node_id} died:\n{agent.log_tail()}")
    process = psutil.Process(agent.process.pid)
    cpu, replicas, mono, wall = cpu_seconds(process), live_children_cpu_seconds(process), time.monotonic(), time.time()
    text = httpx.get(f"{agent.metrics_url}/metrics", timeout=5.0).text
    wall_after = time.time()
    metrics = {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return Snapshot(cpu, replicas, mono, wall, wall_after, metrics)


def cpu_share(before: Snapshot, after: Snapshot) -> float:
    """The agent's CPU between two snapshots as a fraction of one core: 0.3 CPU seconds over 60 s → 0.005."""
    return (after.cpu_s - before.cpu_s) / (after.monotonic_s - before.monotonic_s)


def replicas_cpu_share(before: Snapshot, after: Snapshot) -> float:
    """The replicas' CPU between two snapshots as a fraction of one core (0 for an agent that runs none)."""
    return (after.replicas_cpu_s - before.replicas_cpu_s) / (after.monotonic_s - before.monotonic_s)
