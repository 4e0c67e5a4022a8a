"""Soak benchmark (CONTRACT section 12):
``python -m bench.soak [--quick] [--managed] [--workers N] [--nodes N] [--gpus G] [--duration S] [--profile F]
[--encoding compact|json]``.

One real ``fleetpilot server`` on a fresh PostgreSQL database takes pushes from N simulated nodes (default 1,000),
all in one asyncio process beside it: each samples every 500 ms (GPU rows from the agent's replay probe, through the
NVML probe's own conversion; node and pool rows as ``bench.lib.simulated_agents`` makes them) and, like the agent's
pusher, sends what its spool holds every ``--push-interval`` seconds, at most 2,000 samples a push, again at once
when a push was full, and the same body again (same ``seq``) after a failure, waiting as the pusher does (full
jitter backoff, at least the ``Retry-After`` a 503 asks for). The spool is lazy: ticks not yet sent
are a count, built into rows when they are sent, so a node that falls behind costs no memory. Open loop: a slow
server makes the nodes fall behind, it does not slow their sampling. With ``--managed`` the server first gets pools
and tenants (``bench.lib.managed_fleet``) and each node reports one of the pools, so every answer carries a desired
state.

Measured: samples acknowledged vs offered (the baseline: N × (G + 2) rows × 2 Hz), the backlog left in the spools,
samples lost (acknowledged ``seq`` missing from the database, counted there per node), ingest request p50/p99 of
the acknowledged pushes and p99 of every answer (503s and timeouts too), duplicates as a share of what was stored,
the server's RSS every few seconds (all its processes; start, end, max, slope), the rollup watermark's lag, and the
retention job's rate on the soak's own rows afterwards. Progress goes to stderr; the last line of stdout is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import psutil
from sqlalchemy import Engine, select

from bench.lib.databases import fresh_database
from bench.lib.figures import figure, percentile_or_nan
from bench.lib.lost_samples import lost_by_seq
from bench.lib.managed_fleet import POOLS, TENANTS, create_managed_fleet, pools_by_node
from bench.lib.profiling import profiled
from bench.lib.progress import progress_line
from bench.lib.server_cpu import CpuUse, cpu_snapshot, cpu_use, tree_rss_bytes
from bench.lib.simulated_agents import (
    POOL,
    TICK_SECONDS,
    SimulatedNode,
    _event_loop,
    _receive,
    _remember_missing_sniffio,
    create_agent_tokens,
)
from collector.database import make_engine
from collector.retention import RetentionJob
from collector.rollups import WATERMARK_NAME
from collector.tables import job_state
from fleetpilot.launch import ServerProcess
from inference_agent.probes.replay import Recording, ReplayProbe, load_recording
from inference_agent.push_body import offers_compact, push_body
from inference_agent.pusher import backoff_delay, retry_after_s
from inference_agent.sampler import wire_sample
from wire.samples import SampleJson

PUSH_MAX_SAMPLES = 2000  # the agent's push_max_samples
REQUEST_TIMEOUT_S = 10.0  # the agent's pusher timeout
MAX_RETRY_AFTER_S = 60.0  # the agent's push_max_retry_after_seconds
MONITOR_EVERY_S = 5.0


progress = progress_line("soak")


@dataclass(frozen=True)
class SoakPlan:
    """What the generator process runs: where, as whom, what each node is (and the pool it reports where it is not
    ``POOL``), how often it pushes, how long."""

    url: str
    tokens: dict[str, str]
    gpus: int
    push_interval_s: float
    duration_s: float
    seed: int = 1
    pools: dict[str, str] = field(default_factory=dict)
    compact: bool = True  # the compact encoding once offered, as the agent sends

    @property
    def rows_per_tick(self) -> int:
        return self.gpus + 2

    @property
    def max_ticks(self) -> int:
        """Ticks in a full push: 2,000 samples ÷ 10 rows a tick (8 GPUs) = 200 ticks."""
        return max(1, PUSH_MAX_SAMPLES // self.rows_per_tick)


class SoakNode(SimulatedNode):
    """A simulated node whose GPU rows come from the replay probe; its spool is the count of ticks not yet sent."""

    def __init__(
        self, node_id: str, gpus: int, seed: int, recording: Recording, started: float, pool: str = POOL
    ) -> None:
        super().__init__(node_id, gpus, seed, pool)
        self._probe = ReplayProbe(recording, gpus=gpus)
        for _ in range(seed % 16):  # nodes start at different points of the recording
            self._probe.read()
        self.first_tick_ts = started
        self.ticks_sent = 0  # ticks already in a body (sent, or in flight / to be resent)
        self.unacknowledged: tuple[bytes, int, int, str] | None = None  # body, rows, last seq, media type
        self.acknowledged_seq = 0

    def tick(self, ts: float) -> list[dict[str, Any]]:
        rows = [{"seq": 0, **wire_sample(reading, ts)} for reading in self._probe.read()]
        for row in rows:
            self.seq += 1
            row["seq"] = self.seq
        rows.append(self._sample(ts, None, None, self._node_metrics()))
        rows.append(self._sample(ts, None, self.pool, self._pool_metrics()))
        return rows

    def due_ticks(self, now: float) -> int:
        """Ticks sampled by ``now`` and not yet in a body: the spool's depth."""
        return max(0, int((now - self.first_tick_ts) / TICK_SECONDS) + 1 - self.ticks_sent)

    def next_body(self, now: float, max_ticks: int, compact: bool = False) -> tuple[bytes, int, int, str] | None:
        """The body to push: the unacknowledged one again, else up to ``max_ticks`` due ticks, gzipped, in the
        compact encoding when ``compact`` (the server offered it) or JSON, as the agent's pusher builds it."""
        if self.unacknowledged is not None:
            return self.unacknowledged
        ticks = min(self.due_ticks(now), max_ticks)
        if ticks == 0:
            return None
        rows: list[dict[str, Any]] = []
        for tick in range(self.ticks_sent, self.ticks_sent + ticks):
            rows.extend(self.tick(round(self.first_tick_ts + tick * TICK_SECONDS, 3)))
        self.ticks_sent += ticks
        inventory = None
        if not self.registered:
            inventory = {**self.inventory(), "gpus": [vars(g) for g in self._probe.inventory()]}
        samples = cast(list[SampleJson], rows)  # the simulated agent's rows are the wire's samples
        content_type, raw = push_body(self.node_id, samples, report=None, inventory=inventory, compact=compact)
        self.unacknowledged = (raw, len(rows), self.seq, content_type)
        return self.unacknowledged


@dataclass
class SoakTally:
    """What the generator saw; per-node acknowledged ``seq`` for the count in the database."""

    requests: int = 0
    acknowledged_rows: int = 0
    duplicates: int = 0
    desired: int = 0  # answers that carried a desired state
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)  # acknowledged pushes
    loop_lag_ms: list[float] = field(default_factory=list)  # the generator's own event loop, every 100 ms
    answers_ms: list[float] = field(default_factory=list)  # every push: 503s, and timeouts at the timeout
    acknowledged_seq: dict[str, int] = field(default_factory=dict)
    offered_rows: int = 0
    backlog_rows: int = 0
    elapsed_s: float = 0.0
    cpu_s: float = 0.0


@dataclass(frozen=True)
class Pushed:
    """One push's outcome: "idle" (nothing due), "full" (a full body acknowledged: push again), "ok", or "failed",
    with the ``Retry-After`` a refusal asked for."""

    outcome: str
    retry_after_s: float | None = None


async def _push(
    client: httpx.AsyncClient, node: SoakNode, token: str, tally: SoakTally, max_ticks: int, compact: bool
) -> Pushed:
    pending = node.next_body(time.time(), max_ticks, compact=compact and node.offered)
    if pending is None:
        return Pushed("idle")
    body, rows, last_seq, content_type = pending
    headers = {"authorization": f"Bearer {token}", "content-type": content_type, "content-encoding": "gzip"}
    started = time.perf_counter()
    try:
        response = await client.post("/api/v1/ingest", content=body, headers=headers)
    except httpx.HTTPError as exc:
        tally.errors[type(exc).__name__] += 1
        tally.answers_ms.append((time.perf_counter() - started) * 1000.0)
        return Pushed("failed")
    tally.requests += 1
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    tally.answers_ms.append(elapsed_ms)
    if response.status_code != 200:
        tally.errors[str(response.status_code)] += 1
        return Pushed("failed", retry_after_s(response.headers.get("retry-after"), cap_s=MAX_RETRY_AFTER_S))
    tally.latencies_ms.append(elapsed_ms)
    answer = response.json()
    tally.acknowledged_rows += answer["accepted"]
    tally.duplicates += answer["duplicates"]
    tally.desired += answer.get("desired") is not None
    node.registered, node.unacknowledged, node.acknowledged_seq = True, None, last_seq
    node.offered = offers_compact(response)
    return Pushed("full" if rows >= max_ticks * (node.gpus + 2) else "ok")


async def _node_loop(
    client: httpx.AsyncClient, node: SoakNode, plan: SoakPlan, tally: SoakTally, end: float, stop: Any
) -> None:
    """Push every ``push_interval_s`` (first at a random offset), at once after a full push, and after a failure
    as the agent's pusher waits: full jitter backoff (0.5 s doubling to 30 s), at least a 503's ``Retry-After``."""
    rng = random.Random(node.node_id)
    await asyncio.sleep(rng.uniform(0.0, plan.push_interval_s))
    failures = 0
    while time.time() < end and not stop.is_set():
        pushed = await _push(client, node, plan.tokens[node.node_id], tally, plan.max_ticks, plan.compact)
        if pushed.outcome == "full":
            failures = 0
            continue
        failures = failures + 1 if pushed.outcome == "failed" else 0
        delay = plan.push_interval_s
        if failures:
            delay = max(backoff_delay(failures, rng=rng), pushed.retry_after_s or 0.0)
        await asyncio.sleep(max(0.0, min(delay, end - time.time())))


async def run_soak_load(plan: SoakPlan, stop: Any) -> SoakTally:
    """All nodes, one keep-alive connection each, until ``duration_s`` is up or ``stop``
    (a multiprocessing Event) is set."""
    recording = load_recording()
    started = time.time()
    nodes = [
        SoakNode(n, plan.gpus, plan.seed + i, recording, started, plan.pools.get(n, POOL))
        for i, n in enumerate(sorted(plan.tokens))
    ]
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=3.0, pool=None)
    tally = SoakTally()
    cpu_before = time.process_time()
    end = started + plan.duration_s
    # a client (and its one-connection pool) per node, as separate agents have: one shared pool of 1,000
    # connections spent more than half the generator's CPU scanning itself on every request (py-spy)
    async with contextlib.AsyncExitStack() as clients:
        loops = []
        for node in nodes:
            client = httpx.AsyncClient(base_url=plan.url, limits=httpx.Limits(max_connections=1), timeout=timeout)
            await clients.enter_async_context(client)
            loops.append(_node_loop(client, node, plan, tally, end, stop))
        watch = asyncio.get_running_loop().create_task(_watch_loop_lag(tally.loop_lag_ms))
        await asyncio.gather(*loops)
        watch.cancel()
    tally.cpu_s = time.process_time() - cpu_before
    end = min(end, time.time())
    tally.elapsed_s = end - started
    for node in nodes:
        due = node.due_ticks(end)
        tally.offered_rows += (node.ticks_sent + due) * plan.rows_per_tick
        tally.backlog_rows += due * plan.rows_per_tick + (node.unacknowledged[1] if node.unacknowledged else 0)
        tally.acknowledged_seq[node.node_id] = node.acknowledged_seq
    return tally


async def _watch_loop_lag(lags_ms: list[float]) -> None:
    """How late the generator's loop wakes from a 100 ms sleep: past a few ms, the latencies it measures include its
    own wait for the CPU (the nodes share two cores with the server and PostgreSQL), not only the server's."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + 0.1
        await asyncio.sleep(0.1)
        lags_ms.append((loop.time() - due) * 1000.0)


GENERATOR_PRIORITY = -5  # nice: the nodes stand for agents on machines of their own, so they get the CPU first


def _child(plan: SoakPlan, stop: Any, sender: Any) -> None:
    _remember_missing_sniffio()
    with contextlib.suppress(PermissionError):  # root only; elsewhere its loop lag says what sharing cost
        os.nice(GENERATOR_PRIORITY)
    with asyncio.Runner(loop_factory=_event_loop) as runner:
        sender.send("started")
        sender.send(runner.run(run_soak_load(plan, stop)))
    sender.close()


def run_generator(plan: SoakPlan, while_running: Callable[[Any], None]) -> SoakTally:
    """The nodes in a spawned process (their own interpreter and GIL); ``while_running(stop)`` runs here meanwhile
    and may end the load early by setting ``stop``."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    stop = context.Event()
    process = context.Process(target=_child, args=(plan, stop, sender), name="soak-nodes", daemon=True)
    process.start()
    sender.close()
    deadline = time.monotonic() + plan.duration_s + REQUEST_TIMEOUT_S + 120.0
    try:
        if _receive(receiver, deadline) != "started":
            raise RuntimeError("soak generator did not start")
        while_running(stop)
        tally: SoakTally = _receive(receiver, deadline)
    finally:
        process.join(10.0)
        if process.is_alive():
            process.kill()
    return tally


@dataclass
class ServerWatch:
    """The server's RSS (MB) and the rollup watermark's lag (s) every ``MONITOR_EVERY_S``, with times from start."""

    rss_mb: list[tuple[float, float]] = field(default_factory=list)
    server_p99_ms: str | None = None  # read from the server at the end (server_p99_bound_ms)
    rollup_lag_s: list[tuple[float, float | None]] = field(default_factory=list)
    stopped_early: str | None = None

    def sample_until(self, server: psutil.Process, engine: Engine, end: float, stop: Any, max_rss_mb: float) -> None:
        """Sample until ``end``; past ``max_rss_mb`` set ``stop`` (a server not keeping up holds the requests
        queued at it in memory: 124 → 607 MB in 60 s at 1,000 nodes × 8 GPUs here) and say why."""
        started = time.time()
        while (now := time.time()) < end:
            rss_mb = tree_rss_bytes(server) / 1e6
            self.rss_mb.append((now - started, rss_mb))
            self.rollup_lag_s.append((now - started, rollup_lag(engine, now)))
            if rss_mb > max_rss_mb:
                self.stopped_early = f"server RSS {rss_mb:.0f} MB > {max_rss_mb:.0f} MB after {now - started:.0f} s"
                progress(f"stopping the load early: {self.stopped_early}")
                stop.set()
                return
            time.sleep(max(0.0, min(MONITOR_EVERY_S, end - time.time())))


def server_p99_bound_ms(url: str) -> str | None:
    """The upper bound of the histogram bucket holding the server's 99th percentile ingest duration (from its
    handler's start to its commit; acknowledged requests), e.g. "≤ 250", or "> 2500" past the last bucket."""
    exposition = httpx.get(f"{url}/metrics", timeout=30).text
    buckets = [
        (float(m[1]), float(m[2]))
        for m in re.finditer(
            r'^fleetpilot_collector_ingest_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', exposition, re.M
        )
    ]
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    bound = next(le for le, count in buckets if count >= 0.99 * total)
    return f"> {buckets[-2][0] * 1000:g}" if bound == float("inf") else f"≤ {bound * 1000:g}"


def rollup_lag(engine: Engine, now: float) -> float | None:
    """Seconds between ``now`` and the rollup watermark (None before the first rollup run)."""
    with engine.connect() as conn:
        mark = conn.scalar(select(job_state.c.watermark).where(job_state.c.name == WATERMARK_NAME))
    return None if mark is None else now - float(mark)


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) in value per hour; None with fewer than 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    return 3600.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t if var_t else None


def retention_rate(engine: Engine, now: float, keep_s: float) -> tuple[int, float | None]:
    """Run the server's retention job over the soak's rows, keeping the last ``keep_s``: (rows deleted, rows/s).
    The rate is None when nothing was removed: on PostgreSQL retention drops whole hourly partitions, and a
    10-minute soak's rows rarely fill one that lies wholly before the cutoff (``bench.retention`` measures it)."""
    job = RetentionJob(engine, raw_retention_seconds=keep_s, rollup_retention_seconds=30 * 86400)
    started = time.perf_counter()
    deleted = job.run(now).samples_deleted
    return deleted, (deleted / max(time.perf_counter() - started, 1e-9) if deleted else None)


@dataclass(frozen=True)
class SoakConfig:
    nodes: int
    gpus: int
    push_interval_s: float
    duration_s: float
    max_server_rss_mb: float = 2000.0
    managed: bool = False
    workers: int | None = None  # the server's --workers; None: its default (the cores, on PostgreSQL)
    profile: Path | None = None
    encoding: str = "compact"  # what the nodes send once offered: "compact" (as the agent does) or "json"


def parse_config(argv: list[str] | None) -> SoakConfig:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 nodes for 20 s (under 60 s in all)")
    parser.add_argument("--nodes", type=int, default=None, help="simulated nodes (default 1000, quick 200)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument(
        "--push-interval", type=float, default=5.0, help="seconds between a node's pushes (default 5: 10 ticks)"
    )
    parser.add_argument("--duration", type=float, default=None, help="seconds of load (default 600, quick 20)")
    parser.add_argument(
        "--max-server-rss", type=float, default=2000.0, help="stop the load early past this server RSS (MB)"
    )
    parser.add_argument(
        "--managed",
        action="store_true",
        help="create 20 pools and 15 tenants with quotas first, so every ingest answer carries a desired state",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="the server's --workers (default: its own, the cores on PostgreSQL)"
    )
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the server into this .svg/.txt/.json")
    parser.add_argument(
        "--encoding",
        choices=("compact", "json"),
        default="compact",
        help="what the nodes send once offered: the compact encoding, as the agent does (default), or JSON",
    )
    args = parser.parse_args(argv)
    nodes = args.nodes if args.nodes is not None else (200 if args.quick else 1000)
    duration_s = args.duration if args.duration is not None else (20.0 if args.quick else 600.0)
    if min(nodes, args.gpus, args.workers or 1) < 1 or not args.push_interval > 0 or not duration_s > 0:
        parser.error("--nodes, --gpus and --workers must be at least 1, --push-interval and --duration positive")
    return SoakConfig(
        nodes,
        args.gpus,
        args.push_interval,
        duration_s,
        args.max_server_rss,
        args.managed,
        args.workers,
        args.profile,
        args.encoding,
    )


def run(config: SoakConfig) -> dict[str, Any]:
    node_ids = [f"soak-node-{i:04d}" for i in range(config.nodes)]
    # a node pushing every 5 s must not count as down between pushes: three intervals, as the default 3 s is to 1 s
    env = {"FLEETPILOT_NODE_DOWN_AFTER_SECONDS": str(3 * config.push_interval_s)}
    with (
        tempfile.TemporaryDirectory(prefix="fleetpilot-soak-") as folder,
        fresh_database("postgresql", Path(folder)) as url,
    ):
        engine = make_engine(url)
        try:
            server_process = ServerProcess(url, env=env, log_path=Path(folder) / "server.log", workers=config.workers)
            with server_process as server:
                assert server.process is not None
                progress(f"server pid {server.process.pid} on {server.url}; creating {config.nodes} agent tokens")
                tokens = create_agent_tokens(server, node_ids)
                pools = pools_by_node(node_ids) if config.managed else {}
                if config.managed:
                    progress(f"creating {POOLS} pools and {TENANTS} tenants with quotas (--managed)")
                    create_managed_fleet(server)
                plan = SoakPlan(
                    server.url,
                    tokens,
                    config.gpus,
                    config.push_interval_s,
                    config.duration_s,
                    pools=pools,
                    compact=config.encoding == "compact",
                )
                progress(
                    f"{config.nodes} nodes × {config.gpus} GPUs at 2 Hz, a push every {config.push_interval_s:g} s,"
                    f" for {config.duration_s:g} s"
                )
                with profiled(server.process.pid, config.profile, config.duration_s, progress):
                    tally, watch, cpu = _drive(server, plan, engine, config.max_server_rss_mb)
                lag_end_s = rollup_lag(engine, time.time())
                watch.server_p99_ms = server_p99_bound_ms(server.url)
            stored, lost = lost_by_seq(engine, tally.acknowledged_seq)
            progress(f"acknowledged {tally.acknowledged_rows} samples, database holds {stored}, lost {lost}")
            deleted, delete_rate = retention_rate(engine, time.time(), keep_s=max(60.0, tally.elapsed_s / 2))
        finally:
            engine.dispose()
    return summarize(config, tally, watch, cpu, (stored, lost, lag_end_s), (deleted, delete_rate))


def _drive(
    server: ServerProcess, plan: SoakPlan, engine: Engine, max_rss_mb: float
) -> tuple[SoakTally, ServerWatch, CpuUse]:
    assert server.process is not None
    server_ps = psutil.Process(server.process.pid)
    watch = ServerWatch()
    before = cpu_snapshot(server_ps)

    def monitor(stop: Any) -> None:
        nonlocal before
        before = cpu_snapshot(server_ps)
        watch.sample_until(server_ps, engine, time.time() + plan.duration_s, stop, max_rss_mb)

    tally = run_generator(plan, monitor)
    return tally, watch, cpu_use(before, cpu_snapshot(server_ps), tally.cpu_s)


def summarize(
    config: SoakConfig,
    tally: SoakTally,
    watch: ServerWatch,
    cpu: CpuUse,
    stored_lost_lag: tuple[int, int, float | None],
    retention: tuple[int, float | None],
) -> dict[str, Any]:
    stored, lost, lag_end_s = stored_lost_lag
    rss = [mb for _, mb in watch.rss_mb]
    settled = [(t, mb) for t, mb in watch.rss_mb if t >= 60.0] or watch.rss_mb  # after the first minute's warm-up
    elapsed_s = tally.elapsed_s or config.duration_s
    offered_per_s = tally.offered_rows / elapsed_s
    acknowledged_per_s = tally.acknowledged_rows / elapsed_s
    slope = slope_per_hour(settled)
    lags = [lag for _, lag in watch.rollup_lag_s if lag is not None]
    end_s = watch.rss_mb[-1][0] if watch.rss_mb else 0.0
    last_4_min = [mb for t, mb in watch.rss_mb if t >= end_s - 240.0]
    return {
        "bench": "soak",
        "backend": "postgresql",
        "managed": config.managed,
        "workers": config.workers,
        "encoding": config.encoding,
        "nodes": config.nodes,
        "gpus_per_node": config.gpus,
        "push_interval_s": config.push_interval_s,
        "duration_s": round(elapsed_s, 1),
        "stopped_early": watch.stopped_early,
        "samples_offered": tally.offered_rows,
        "samples_sent": tally.acknowledged_rows,
        "samples_stored": stored,
        "samples_lost": lost,
        "samples_backlog_end": tally.backlog_rows,
        # seconds of sampling waiting in a node's spool at the end, on average: under the push interval = keeping up
        "backlog_s_end": round(tally.backlog_rows / (config.nodes * (config.gpus + 2) / TICK_SECONDS), 1),
        "duplicates": tally.duplicates,
        "duplicates_share_of_stored": round(tally.duplicates / stored, 4) if stored else None,
        "requests": tally.requests,
        "answers_with_desired": tally.desired,
        "errors": sum(tally.errors.values()),
        "error_kinds": dict(tally.errors),
        "p50_ms": figure(percentile_or_nan(tally.latencies_ms, 50), 1),
        "p99_ms": figure(percentile_or_nan(tally.latencies_ms, 99), 1),
        "p99_all_answers_ms": figure(percentile_or_nan(tally.answers_ms, 99), 1),  # 503s and timeouts too
        "server_p99_ms": watch.server_p99_ms,  # the server's own ingest duration (its histogram), no client wait in it
        "generator_loop_lag_p99_ms": figure(percentile_or_nan(tally.loop_lag_ms, 99), 1),
        "answers_503": tally.errors.get("503", 0),
        "samples_per_second": round(acknowledged_per_s, 1),
        "baseline": round(offered_per_s, 1),
        "baseline_samples_per_second_offered": round(offered_per_s, 1),
        "ratio": round(acknowledged_per_s / offered_per_s, 3) if offered_per_s else None,
        "nodes_sustained": round(config.nodes * acknowledged_per_s / offered_per_s) if offered_per_s else None,
        "server_rss_mb_start": round(rss[0], 1) if rss else None,
        "server_rss_mb_end": round(rss[-1], 1) if rss else None,
        "server_rss_mb_max": round(max(rss), 1) if rss else None,
        "server_rss_mb_slope_per_hour": None if slope is None else round(slope, 1),
        # (max − min) / min over the last 4 minutes: "flat" is within 0.05
        "server_rss_change_last_4_min": (
            round((max(last_4_min) - min(last_4_min)) / min(last_4_min), 3) if len(last_4_min) > 1 else None
        ),
        "server_rss_mb_by_minute": [round(mb) for t, mb in watch.rss_mb if t % 60.0 < MONITOR_EVERY_S],
        "rollup_lag_s_end": None if lag_end_s is None else round(lag_end_s, 1),
        "rollup_lag_s_max": round(max(lags), 1) if lags else None,
        "retention_rows_deleted": retention[0],
        "retention_rows_per_second": None if retention[1] is None else round(retention[1], 1),
        "server_cpu_cores": round(cpu.server_cores, 2),
        "generator_cpu_cores": round(cpu.generator_cores, 2),
        "database_cpu_cores": round(cpu.database_cores, 2),
        "other_cpu_cores": round(cpu.other_cores, 2),
        "cpu_cores": psutil.cpu_count() or 1,
    }


def main(argv: list[str] | None = None) -> int:
    summary = run(parse_config(argv))
    progress(
        f"{summary['samples_per_second']:.0f} of {summary['baseline']:.0f} samples/s offered"
        f" (ratio {summary['ratio']}),"
        f" p99 {summary['p99_ms']} ms, lost {summary['samples_lost']}, backlog {summary['samples_backlog_end']},"
        f" RSS {summary['server_rss_mb_start']} → {summary['server_rss_mb_end']} MB"
    )
    print(json.dumps(summary), flush=True)
    return 0 if summary["samples_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
