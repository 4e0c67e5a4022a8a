"""Ingest benchmark (CONTRACT section 12):
``python -m bench.ingest [--quick] [--managed] [--backend sqlite|postgresql]``.

A real ``fleetpilot server`` on loopback takes closed-loop pushes from simulated agents in another process; the
rows it acknowledges are counted back from the database (nothing lost or stored twice), and the same number of
same-shaped rows is then bulk-inserted straight into the emptied table with the server's own sample insert, in big
transactions, as the baseline (and, for context, with a bare DBAPI ``executemany``). With ``--managed`` the server
first gets pools and tenants (``bench.lib.managed_fleet``), so each answer also carries a desired state. Progress goes
to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from sqlalchemy import Engine, func, select, text

from bench.lib.databases import fresh_database
from bench.lib.figures import figure, percentile_or_nan
from bench.lib.managed_fleet import POOLS, TENANTS, create_managed_fleet, pools_by_node
from bench.lib.profiling import profiled
from bench.lib.progress import progress_line
from bench.lib.server_cpu import CpuSnapshot, CpuUse, cpu_snapshot, cpu_use
from bench.lib.simulated_agents import (
    POOL,
    LoadPlan,
    LoadResult,
    PushShape,
    SimulatedNode,
    create_agent_tokens,
    run_in_process,
)
from collector.batch import SampleBatch
from collector.batch_decode import decode_json
from collector.database import make_engine
from collector.group_rows import GroupRows, group_rows
from collector.sample_insert import SAMPLE_COLUMNS, sample_inserter, sample_tuples
from collector.tables import NO_DEVICE, samples
from fleetpilot.launch import ServerProcess

BASELINE_CHUNK_ROWS = 10_000
TARGET_DEVICE_ROWS_PER_SECOND = 16_000
TARGET_P99_MS = 100.0
TARGET_RATIO = 0.5


progress = progress_line("ingest")


@dataclass(frozen=True)
class BenchConfig:
    backend: str
    nodes: int
    gpus: int
    batch_ticks: int
    concurrency: int
    warmup_s: float
    duration_s: float
    gzip: bool
    profile: Path | None
    managed: bool = False
    workers: int | None = 1
    encoding: str = "compact"  # the server's --workers; None: its default (the cores, on PostgreSQL)

    @property
    def shape(self) -> PushShape:
        return PushShape(gpus=self.gpus, batch_ticks=self.batch_ticks)


def parse_config(argv: list[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--quick", action="store_true", help="shorter run (under 60 s in all)")
    parser.add_argument("--nodes", type=int, default=200, help="simulated nodes, each with its own agent token")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--batch-ticks", type=int, default=2, help="500 ms ticks per push (2 = one push a second)")
    parser.add_argument("--concurrency", type=int, default=16, help="pushes in flight (closed loop)")
    parser.add_argument("--duration", type=float, default=None, help="measured seconds (default 20, quick 8)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before measuring")
    parser.add_argument("--no-gzip", dest="gzip", action="store_false", help="plain JSON bodies (the agent gzips)")
    parser.add_argument(
        "--encoding",
        choices=("compact", "json"),
        default="compact",
        help="what the nodes send once offered: the compact encoding, as the agent does (default), or JSON",
    )
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the server into this .svg/.txt/.json")
    parser.add_argument("--workers", type=int, default=1, help="the server's --workers (default 1)")
    parser.add_argument(
        "--managed",
        action="store_true",
        help="create 20 pools and 15 tenants with quotas first, so every ingest answer carries a desired state",
    )
    args = parser.parse_args(argv)
    if min(args.nodes, args.gpus, args.batch_ticks, args.concurrency, args.workers) < 1:
        parser.error("--nodes, --gpus, --batch-ticks, --concurrency and --workers must be at least 1")
    return BenchConfig(
        backend=args.backend,
        nodes=args.nodes,
        gpus=args.gpus,
        batch_ticks=args.batch_ticks,
        concurrency=args.concurrency,
        warmup_s=args.warmup,
        duration_s=args.duration if args.duration is not None else (8.0 if args.quick else 20.0),
        gzip=args.gzip,
        profile=args.profile,
        managed=args.managed,
        workers=args.workers,
        encoding=args.encoding,
    )


def drive_load(
    server: ServerProcess, config: BenchConfig, tokens: dict[str, str], pools: dict[str, str]
) -> tuple[LoadResult, CpuUse]:
    """Run the simulated agents (each reporting its pool in ``pools``, else the default one) against the server and
    measure the CPU each side used meanwhile."""
    assert server.process is not None
    server_ps = psutil.Process(server.process.pid)
    plan = LoadPlan(
        server.url,
        tokens,
        config.shape,
        config.concurrency,
        config.warmup_s,
        config.duration_s,
        gzip=config.gzip,
        compact=config.encoding == "compact",
        pools=pools,
    )
    snapshots: list[CpuSnapshot] = []
    with profiled(server.process.pid, config.profile, config.warmup_s + config.duration_s, progress):
        result = run_in_process(plan, on_start=lambda: snapshots.append(cpu_snapshot(server_ps)))
    return result, cpu_use(snapshots[0], cpu_snapshot(server_ps), result.cpu_s)


def stored_rows(engine: Engine) -> tuple[int, int]:
    """All sample rows and device rows now in the database, counted there."""
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(samples)).scalar_one()
        device = conn.execute(
            select(func.count()).select_from(samples).where(samples.c.device != NO_DEVICE)
        ).scalar_one()
    return int(total), int(device)


def baseline_rows(node_ids: list[str], pools: dict[str, str], shape: PushShape, count: int) -> list[GroupRows]:
    """``count`` rows shaped like the pushed ones, passed through the server's own decoder and row builder, in
    chunks of ``BASELINE_CHUNK_ROWS`` (one transaction each)."""
    nodes = [SimulatedNode(n, shape.gpus, seed, pools.get(n, POOL)) for seed, n in enumerate(node_ids)]
    batches: list[SampleBatch] = []
    made, now = 0, time.time()
    while made < count:
        for node in nodes:
            samples = node.tick(now)[: count - made]
            body = json.dumps({"node_id": node.node_id, "samples": samples}).encode()
            batches.append(decode_json(body, max_samples=len(samples), now=now, max_future_seconds=300, max_replicas=1))
            made += len(samples)
        now += 0.5
    chunks: list[list[SampleBatch]] = []
    rows = 0
    for batch in batches:
        if not chunks or rows + len(batch) > BASELINE_CHUNK_ROWS:
            chunks.append([])
            rows = 0
        chunks[-1].append(batch)
        rows += len(batch)
    return [group_rows(chunk) for chunk in chunks]


def bulk_insert_rate(engine: Engine, chunks: list[GroupRows]) -> float:
    """Rows per second of the server's own sample insert (``collector.sample_insert.sample_inserter``), 10,000 rows a
    transaction."""
    insert = sample_inserter(engine.dialect.name)
    inserted = 0
    started = time.perf_counter()
    for rows in chunks:
        with engine.begin() as conn:
            inserted += len(insert(conn, rows, np.arange(len(rows))))
    elapsed = time.perf_counter() - started
    wanted = sum(len(rows) for rows in chunks)
    if inserted != wanted:
        raise RuntimeError(f"baseline stored {inserted} of {wanted} rows")
    return inserted / elapsed


def raw_insert_rate(engine: Engine, chunks: list[GroupRows]) -> float:
    """Rows per second of a bare DBAPI ``executemany`` of the same rows, 10,000 a transaction: what the database
    itself takes with no SQLAlchemy per-row work in the way; context for the baseline."""
    marker = "%s" if engine.dialect.name == "postgresql" else "?"
    names = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
    markers = ", ".join([marker] * len(SAMPLE_COLUMNS))
    sql = f"INSERT INTO samples ({names}) VALUES ({markers}) ON CONFLICT DO NOTHING"
    # The tuples built before the clock starts: the database's own rate, with no per-row work of ours in the way.
    data = [row for rows in chunks for row in sample_tuples(rows, np.arange(len(rows)))]
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        started = time.perf_counter()
        for first in range(0, len(data), BASELINE_CHUNK_ROWS):
            cursor.executemany(sql, data[first : first + BASELINE_CHUNK_ROWS])
            raw.commit()
        elapsed = time.perf_counter() - started
    finally:
        raw.close()
    return len(data) / elapsed


def empty_samples(engine: Engine) -> None:
    """Empty the samples table so the baseline starts from the same empty table the server started from."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("TRUNCATE samples"))
        else:
            conn.execute(samples.delete())


@dataclass(frozen=True)
class Baselines:
    """Rows per second bulk-inserted straight into the emptied table: the server's statement, and bare DBAPI."""

    server_statement: float
    raw_dbapi: float


def summarize(
    config: BenchConfig, load: LoadResult, cpu: CpuUse, stored: tuple[int, int], baselines: Baselines
) -> dict[str, Any]:
    shape = config.shape
    baseline = baselines.server_statement
    rows_per_second = load.accepted / load.window_s
    device_rows_per_second = rows_per_second * shape.device_rows / shape.rows
    p99 = percentile_or_nan(load.latencies_ms, 99)
    ratio = rows_per_second / baseline if baseline else math.nan
    return {
        "bench": "ingest",
        "backend": config.backend,
        "managed": config.managed,
        "rows_per_second": round(rows_per_second, 1),
        "device_rows_per_second": round(device_rows_per_second, 1),
        "samples_per_second": round(rows_per_second * shape.values / shape.rows, 1),
        "p50_ms": figure(percentile_or_nan(load.latencies_ms, 50), 2),
        "p99_ms": figure(p99, 2),
        "baseline_rows_per_second": round(baseline, 1),
        "baseline": round(baseline, 1),
        "ratio": figure(ratio, 3),
        "raw_baseline_rows_per_second": round(baselines.raw_dbapi, 1),
        "ratio_to_raw": round(rows_per_second / baselines.raw_dbapi, 3),
        "nodes": config.nodes,
        "gpus_per_node": config.gpus,
        "batch_ticks": config.batch_ticks,
        "rows_per_request": shape.rows,
        "gzip": config.gzip,
        "encoding": config.encoding if config.gzip else "json",
        "concurrency": config.concurrency,
        "workers": config.workers,
        "warmup_s": config.warmup_s,
        "duration_s": config.duration_s,
        "requests": load.requests,
        "requests_total": load.requests_total,
        "answers_with_desired": load.desired_total,
        "errors": sum(load.errors.values()),
        "error_kinds": dict(load.errors),
        "accepted_rows": load.accepted_total,
        "stored_rows": stored[0],
        "stored_device_rows": stored[1],
        "duplicates": load.duplicates_total,
        "lost": max(0, load.accepted_total - stored[0]),
        "cpu_cores": psutil.cpu_count() or 1,
        "cpu_cores_busy": round(cpu.machine_cores, 2),
        "server_cpu_cores": round(cpu.server_cores, 2),
        "generator_cpu_cores": round(cpu.generator_cores, 2),
        "database_cpu_cores": round(cpu.database_cores, 2),
        "other_cpu_cores": round(cpu.other_cores, 2),
        "server_workers": 1,
        "targets_met": {
            "device_rows_per_second": device_rows_per_second >= TARGET_DEVICE_ROWS_PER_SECOND,
            "p99_ms": p99 < TARGET_P99_MS,
            "ratio": ratio >= TARGET_RATIO,
        },
    }


def describe_load(config: BenchConfig) -> str:
    shape = config.shape
    return (
        f"load: {config.nodes} nodes × {shape.gpus} GPUs, {shape.batch_ticks} ticks ({shape.rows} rows) per push,"
        f" {config.concurrency} in flight, {config.warmup_s:g} s warm-up + {config.duration_s:g} s measured;"
        f" the generator runs in its own process: {psutil.cpu_count()} cores shared by server, generator, database"
    )


def run(config: BenchConfig) -> dict[str, Any]:
    node_ids = [f"bench-node-{i:04d}" for i in range(config.nodes)]
    pools = pools_by_node(node_ids) if config.managed else {}
    with (
        tempfile.TemporaryDirectory(prefix="fleetpilot-bench-") as folder,
        fresh_database(config.backend, Path(folder)) as url,
    ):
        progress(f"{config.backend} database ready; starting the server")
        with ServerProcess(url, log_path=Path(folder) / "server.log", workers=config.workers) as server:
            assert server.process is not None
            progress(f"server pid {server.process.pid} on {server.url}; creating {config.nodes} agent tokens")
            tokens = create_agent_tokens(server, node_ids)
            if config.managed:
                progress(f"creating {POOLS} pools and {TENANTS} tenants with quotas (--managed)")
                create_managed_fleet(server)
            progress(describe_load(config))
            load, cpu = drive_load(server, config, tokens, pools)
        engine = make_engine(url)
        try:
            stored = stored_rows(engine)
            progress(f"server acknowledged {load.accepted_total} rows, database holds {stored[0]}; baseline next")
            rows = baseline_rows(node_ids, pools, config.shape, stored[0])
            empty_samples(engine)
            baseline = bulk_insert_rate(engine, rows)
            empty_samples(engine)
            raw_baseline = raw_insert_rate(engine, rows)
        finally:
            engine.dispose()
    return summarize(config, load, cpu, stored, Baselines(baseline, raw_baseline))


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    summary = run(config)
    progress(
        f"{summary['device_rows_per_second']:.0f} device rows/s ({summary['rows_per_second']:.0f} rows/s),"
        f" p99 {summary['p99_ms']} ms, baseline {summary['baseline_rows_per_second']:.0f} rows/s,"
        f" ratio {summary['ratio']}, errors {summary['errors']}, lost {summary['lost']}"
    )
    print(json.dumps(summary), flush=True)
    ok = summary["errors"] == 0 and summary["lost"] == 0 and summary["stored_rows"] == summary["accepted_rows"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
