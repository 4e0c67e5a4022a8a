"""Agent overhead benchmark (CONTRACT section 12): ``python -m bench.agent_overhead [--quick]``.

A real ``fleetpilot server`` on loopback, and two real ``fleetpilot agent`` processes pushing to it side by side: one
with the replay probe standing for 8 GPUs, the baseline with ``--gpu-probe none`` (host probe only). After a warm-up,
each agent's CPU (psutil, over the window), RSS, and its own ``/metrics`` (ticks, skipped ticks, jitter p99) are
read, and the samples the collector stored for each node are counted in the database. Each probe's per-read cost and
the sampler's whole tick are timed in this process first. Progress goes to stderr; the last stdout line is JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import psutil
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, and_, func, select

from bench.lib.agent_snapshot import Snapshot, cpu_share, snapshot
from bench.lib.progress import progress_line
from collector.database import make_engine
from collector.tables import samples
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.probes.base import Probe
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.probes.exposition_fetch import ReplayFetch
from inference_agent.probes.host import HostProbe
from inference_agent.probes.replay import ReplayProbe
from inference_agent.sampler import Sampler
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry
from inference_agent.ticker import Ticker
from migrations import runner
from wire.percentile import percentile

GPUS = 8
NODE_ID = "bench-node"
BASELINE_NODE_ID = "bench-node-baseline"
TARGET_CPU_PERCENT = 1.0
TARGET_JITTER_P99_MS = 20.0
TARGET_RSS_MB = 80.0
AGENT_READY_TIMEOUT_S = 30.0
JITTER_P99_GAUGE = "fleetpilot_agent_tick_jitter_p99_seconds"


progress = progress_line("agent_overhead")


@dataclass(frozen=True)
class BenchConfig:
    warmup_s: float
    window_s: float
    reads: int


def parse_config(argv: list[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_overhead", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter run (under 60 s in all)")
    parser.add_argument("--window", type=float, default=None, help="measured seconds (default 60, quick 20)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before measuring (default 10, quick 5)")
    parser.add_argument("--reads", type=int, default=None, help="reads per probe timing (default 500, quick 200)")
    args = parser.parse_args(argv)
    config = BenchConfig(
        warmup_s=args.warmup if args.warmup is not None else (5.0 if args.quick else 10.0),
        window_s=args.window if args.window is not None else (20.0 if args.quick else 60.0),
        reads=args.reads if args.reads is not None else (200 if args.quick else 500),
    )
    if config.window_s <= 0 or config.warmup_s < 0 or config.reads < 1:
        parser.error("--window must be positive, --warmup not negative, --reads at least 1")
    return config


# -- per-read cost of each probe, in this process --------------------------------------------------------------------


def ms_per_call(call: Callable[[], object], reads: int) -> float:
    """Mean wall milliseconds of ``call()`` over ``reads`` calls, after one untimed call (first-read setup)."""
    call()
    started = time.perf_counter()
    for _ in range(reads):
        call()
    return (time.perf_counter() - started) / reads * 1000.0


def vllm_probe() -> EngineScrapeProbe:
    """A vLLM scrape probe fed the packaged scrapes 1 and 2 in turn, one second apart on a fake clock.

    Alternating makes every other interval look like a counter reset; the parsing, which dominates, is the same.
    """
    fixtures = resources.files("inference_agent.probes").joinpath("fixtures", "engines")
    texts = [fixtures.joinpath(f"vllm_scrape_{n}.prom").read_text() for n in (1, 2)]
    clock = itertools.count(start=1.0, step=1.0)
    fetch = ReplayFetch(itertools.cycle(texts))
    return EngineScrapeProbe("vllm", "http://127.0.0.1:8000/metrics", "vllm", fetch=fetch, clock=lambda: next(clock))


def tick_ms(probes: list[Probe], gpu: ReplayProbe, spool_dir: Path, reads: int) -> float:
    """Mean milliseconds of ``Sampler.sample_once`` (read every probe, build the samples, append to a real spool)."""
    spool = Spool(spool_dir)
    telemetry = AgentTelemetry(CollectorRegistry())
    sampler = Sampler(spool, telemetry, gpu=gpu, probes=probes, network_latency=lambda: 0.002)
    return ms_per_call(sampler.sample_once, reads)


def probe_costs(reads: int) -> tuple[dict[str, float], dict[str, float]]:
    """(ms per read of each probe, ms per whole sampler tick with and without the engine probe inline)."""
    with tempfile.TemporaryDirectory(prefix="fleetpilot-bench-probes-") as folder:
        replay, host, vllm = ReplayProbe.from_file(None, gpus=GPUS), HostProbe(data_dir=folder), vllm_probe()
        per_probe = {
            f"replay_{GPUS}_gpus": ms_per_call(replay.read, reads),
            "host": ms_per_call(host.read, reads),
            "engine_vllm": ms_per_call(vllm.read, reads),
        }
        ticks = {
            "replay_host": tick_ms([host], replay, Path(folder) / "spool-a", reads),
            "replay_host_vllm": tick_ms([host, vllm], replay, Path(folder) / "spool-b", reads),
        }
    return per_probe, ticks


# -- the agents as real processes ------------------------------------------------------------------------------------


@contextmanager
def running_agents(agents: list[AgentProcess]) -> Iterator[list[AgentProcess]]:
    """Start every agent (each start waits for its ``/healthz``); always stop them all on the way out."""
    try:
        for agent in agents:
            agent.start()
        yield agents
    finally:
        for agent in agents:
            agent.stop()


def window_jitter_p99_le_ms(before: Snapshot, after: Snapshot) -> float:
    """Upper bucket bound (ms) holding the window's p99 tick lateness, from the jitter histogram's bucket deltas."""
    name = "fleetpilot_agent_tick_jitter_seconds"
    count = after.value(f"{name}_count") - before.value(f"{name}_count")
    bounds = sorted(
        (float(dict(labels)["le"]), dict(labels)["le"]) for m, labels in after.metrics if m == f"{name}_bucket"
    )
    for bound, le in bounds:
        if after.value(f"{name}_bucket", le=le) - before.value(f"{name}_bucket", le=le) >= 0.99 * count:
            return bound * 1000.0
    return math.nan


@dataclass(frozen=True)
class Stored:
    """What the collector holds for one node over a window: samples, distinct tick timestamps, and ``seq`` gaps."""

    samples: int
    ticks: int
    seq_gaps: int  # seqs missing between the window's first and last stored sample: lost samples


def stored_samples(engine: Engine, node_id: str, since: float, until: float) -> Stored:
    """Count in the database what the collector stored for ``node_id`` with ``since <= ts < until``."""
    where = and_(samples.c.node_id == node_id, samples.c.ts >= since, samples.c.ts < until)
    query = select(
        func.count(), func.count(func.distinct(samples.c.ts)), func.min(samples.c.seq), func.max(samples.c.seq)
    ).where(where)
    with engine.connect() as conn:
        rows, ticks, first, last = conn.execute(query).one()
    return Stored(int(rows), int(ticks), int(last - first + 1 - rows) if rows else 0)


def agent_figures(before: Snapshot, after: Snapshot, rss_bytes: int, stored: Stored) -> dict[str, Any]:
    """One agent's figures over the window (CPU, RSS, ticks, jitter, the agent's own tick time, stored samples)."""
    wall = after.monotonic_s - before.monotonic_s
    ticks = after.value("fleetpilot_agent_ticks_total") - before.value("fleetpilot_agent_ticks_total")
    duration = "fleetpilot_agent_tick_duration_seconds"
    tick_s = after.value(f"{duration}_sum") - before.value(f"{duration}_sum")
    tick_n = after.value(f"{duration}_count") - before.value(f"{duration}_count")
    return {
        "cpu_percent_of_one_core": round(cpu_share(before, after) * 100.0, 3),
        "rss_mb": round(rss_bytes / 2**20, 1),
        "tick_jitter_p99_ms": round(after.value(JITTER_P99_GAUGE) * 1000.0, 3),
        "tick_jitter_p99_ms_window_bucket_le": window_jitter_p99_le_ms(before, after),
        "ticks": int(ticks),
        "skipped_ticks": int(
            after.value("fleetpilot_agent_ticks_skipped_total") - before.value("fleetpilot_agent_ticks_skipped_total")
        ),
        "agent_tick_ms": round(tick_s / tick_n * 1000.0, 3) if tick_n else math.nan,
        "stored_samples": stored.samples,
        "stored_ticks": stored.ticks,
        "stored_seq_gaps": stored.seq_gaps,
        "samples_per_tick": round(stored.samples / stored.ticks, 3) if stored.ticks else math.nan,
        "window_s": round(wall, 2),
    }


@dataclass(frozen=True)
class Window:
    """Both agents' snapshots at the window's start and end, their RSS at the end, and the machine meanwhile."""

    before: list[Snapshot]
    after: list[Snapshot]
    rss_bytes: list[int]
    machine: dict[str, float]


def measure_agents(server: ServerProcess, database_url: str, config: BenchConfig, folder: Path) -> dict[str, Any]:
    """Run the 8-GPU agent and the baseline side by side through warm-up and window; figures per agent label."""
    labels = ("gpus", "baseline")
    agents = [
        AgentProcess(
            collector=server.url,
            token=server.create_agent_token(node_id),
            node_id=node_id,
            gpu_probe=probe,
            spool_dir=folder / f"spool-{label}",
            log_path=folder / f"agent-{label}.log",
            ready_timeout_s=AGENT_READY_TIMEOUT_S,
        )
        for label, node_id, probe in zip(labels, (NODE_ID, BASELINE_NODE_ID), (f"replay::{GPUS}", "none"), strict=True)
    ]
    with running_agents(agents), bare_ticker_process(config.warmup_s + config.window_s + 2.0) as bare:
        for agent in agents:
            assert agent.process is not None
            progress(
                f"agent {agent.node_id} pid {agent.process.pid} ({agent.gpu_probe}), metrics on {agent.metrics_url}"
            )
        progress(f"warming up {config.warmup_s:g} s, then measuring {config.window_s:g} s")
        time.sleep(config.warmup_s)
        window = measure_window(agents, config.window_s, bare)
        progress("window over; stopping the agents (SIGTERM flushes their spools to the collector)")
    engine = make_engine(database_url)
    try:
        figures: dict[str, Any] = {
            label: agent_figures(b, a, rss, stored_samples(engine, agent.node_id, b.wall_after_s, a.wall_before_s))
            for label, agent, b, a, rss in zip(
                labels, agents, window.before, window.after, window.rss_bytes, strict=True
            )
        }
    finally:
        engine.dispose()
    return figures | {"machine": window.machine}


def measure_window(agents: list[AgentProcess], window_s: float, bare: Callable[[float, float], list[float]]) -> Window:
    """Snapshot every agent, wait ``window_s``, snapshot again; the machine's load and the bare ticker alongside."""
    machine_before, before = psutil.cpu_times(), [snapshot(a) for a in agents]
    time.sleep(window_s)
    after = [snapshot(a) for a in agents]
    busy = machine_busy_cores(machine_before, psutil.cpu_times())
    rss = [psutil.Process(a.process.pid).memory_info().rss for a in agents if a.process is not None]
    lateness_ms = [late * 1000.0 for late in bare(before[0].monotonic_s, after[0].monotonic_s)]
    machine = {
        "busy_cores": round(busy, 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "bare_ticker_jitter_p99_ms": round(percentile(lateness_ms, 99.0), 3) if lateness_ms else math.nan,
        "bare_ticker_jitter_max_ms": round(max(lateness_ms), 3) if lateness_ms else math.nan,
        "bare_ticker_ticks": len(lateness_ms),
    }
    return Window(before, after, rss, machine)


# -- the machine's own scheduling noise: a bare ticker beside the agents --------------------------------------------


def bare_ticker(seconds: float) -> None:
    """Tick every 500 ms with the agent's ``Ticker`` doing nothing else; print ``[[deadline, lateness], ...]``.

    Run in its own process beside the agents, it shows how late this machine wakes a sleeping thread anyway.
    """
    end = time.monotonic() + seconds
    ticker = Ticker(0.5)
    lateness: list[list[float]] = []
    while (tick := ticker.next()) is not None and tick.deadline < end:
        lateness.append([tick.deadline, tick.lateness_s])
    print(json.dumps(lateness), flush=True)


@contextmanager
def bare_ticker_process(seconds: float) -> Iterator[Callable[[float, float], list[float]]]:
    """Run ``bare_ticker`` in a subprocess; yields a function giving its lateness values within a monotonic window."""
    code = "import sys; from bench.agent_overhead import bare_ticker; bare_ticker(float(sys.argv[1]))"
    process = subprocess.Popen([sys.executable, "-c", code, str(seconds)], stdout=subprocess.PIPE)
    result: list[list[float]] | None = None

    def within(start: float, end: float) -> list[float]:
        nonlocal result
        if result is None:
            out, _ = process.communicate(timeout=seconds + 30.0)
            result = json.loads(out)
        return [late for deadline, late in result if start <= deadline < end]

    try:
        yield within
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def machine_busy_cores(before: Any, after: Any) -> float:
    """Cores kept busy between two ``psutil.cpu_times()``: all CPU time less idle and iowait, over wall time."""
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    total = sum(after) - sum(before)
    return (total - idle) / total * (psutil.cpu_count() or 1) if total > 0 else math.nan


# -- the summary -----------------------------------------------------------------------------------------------------


def summarize(runs: dict[str, Any], per_probe: dict[str, float], ticks: dict[str, float]) -> dict[str, Any]:
    gpus, baseline = runs["gpus"], runs["baseline"]
    cpu, base_cpu = gpus["cpu_percent_of_one_core"], baseline["cpu_percent_of_one_core"]
    return {
        "bench": "agent_overhead",
        "gpus": GPUS,
        "cpu_percent_of_one_core": cpu,
        "tick_jitter_p99_ms": gpus["tick_jitter_p99_ms"],
        "rss_mb": gpus["rss_mb"],
        "baseline": base_cpu,
        "baseline_cpu_percent_of_one_core": base_cpu,
        "ratio": round(cpu / base_cpu, 3) if base_cpu > 0 else math.nan,
        "samples_per_tick": gpus["samples_per_tick"],
        "expected_samples_per_tick": GPUS + 1,
        "ticks": gpus["ticks"],
        "skipped_ticks": gpus["skipped_ticks"],
        "probe_ms": {name: round(ms, 4) for name, ms in per_probe.items()},
        "tick_ms": round(ticks["replay_host"], 4),
        "tick_ms_with_vllm_inline": round(ticks["replay_host_vllm"], 4),
        "window_s": gpus["window_s"],
        "agent": gpus,
        "baseline_agent": baseline,
        "machine": runs["machine"],
        "cpu_cores": psutil.cpu_count() or 1,
        "targets_met": {
            "cpu_percent_of_one_core": cpu < TARGET_CPU_PERCENT,
            "tick_jitter_p99_ms": gpus["tick_jitter_p99_ms"] < TARGET_JITTER_P99_MS,
            "rss_mb": gpus["rss_mb"] < TARGET_RSS_MB,
        },
    }


def report(summary: dict[str, Any]) -> None:
    """The human-readable verdict on stderr: each figure against its target."""
    met = summary["targets_met"]
    lines = [
        f"CPU {summary['cpu_percent_of_one_core']}% of one core (target < {TARGET_CPU_PERCENT:g}%)",
        f"tick jitter p99 {summary['tick_jitter_p99_ms']} ms (target < {TARGET_JITTER_P99_MS:g} ms)",
        f"RSS {summary['rss_mb']} MB (target < {TARGET_RSS_MB:g} MB)",
    ]
    for line, ok in zip(lines, met.values(), strict=True):
        progress(f"{'met   ' if ok else 'MISSED'} {line}")
    progress(
        f"baseline (host probe only) {summary['baseline_cpu_percent_of_one_core']}% → ratio {summary['ratio']};"
        f" {summary['samples_per_tick']} samples per tick stored (expected {summary['expected_samples_per_tick']});"
        f" ticks {summary['ticks']}, skipped {summary['skipped_ticks']}"
    )
    progress(f"probe ms per read {summary['probe_ms']}; sampler tick {summary['tick_ms']} ms")
    machine = summary["machine"]
    progress(
        f"machine over the window: {machine['busy_cores']} of {summary['cpu_cores']} cores busy,"
        f" load average {machine['load_average_1m']}; a bare 500 ms ticker beside the agents was late by"
        f" p99 {machine['bare_ticker_jitter_p99_ms']} ms, max {machine['bare_ticker_jitter_max_ms']} ms"
    )


def run(config: BenchConfig) -> dict[str, Any]:
    progress(f"timing each probe over {config.reads} reads in this process")
    per_probe, ticks = probe_costs(config.reads)
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleetpilot-bench-agent-")))
        url = f"sqlite:///{folder}/bench.db"
        runner.upgrade(url)
        server = stack.enter_context(ServerProcess(url))
        assert server.process is not None
        progress(f"server pid {server.process.pid} on {server.url}; starting both agents")
        runs = measure_agents(server, url, config, folder)
    return summarize(runs, per_probe, ticks)


def main(argv: list[str] | None = None) -> int:
    summary = run(parse_config(argv))
    report(summary)
    print(json.dumps(summary), flush=True)
    return 0 if all_stored(summary) else 1


def all_stored(summary: dict[str, Any]) -> bool:
    """Every tick of the window stored whole, without a ``seq`` gap.

    A tick that falls during the closing ``/metrics`` scrape can be counted and yet lie past the window's end, so
    ticks counted and ticks stored may differ by one; a lost push (two ticks) cannot hide in that.
    """
    agent = summary["agent"]
    whole = summary["samples_per_tick"] == summary["expected_samples_per_tick"]
    return bool(whole and agent["stored_seq_gaps"] == 0 and abs(agent["stored_ticks"] - agent["ticks"]) <= 1)


if __name__ == "__main__":
    sys.exit(main())
