"""Ingest benchmark (CONTRACT section 12):
``python -m bench.ingest [--quick] [--managed] [--backend sqlite|postgresql]``.

A real ``fleetpilot server`` on loopback takes closed-loop pushes from simulated agents in another process; the
rows it acknowledges are counted back from the database (nothing lost or stored twice), and the same number of
same-shaped rows is then bulk-inserted straight into the emptied table with the server's own sample insert, in big
transactions, as the baseline (and, for context, with a bare DBAPI ``executemany``). With ``--managed`` the server
first gets pools and tenants (``bench.managed_fleet``), so each answer also carries a desired state. Progress goes
to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

from bench.managed_fleet import POOLS, TENANTS, create_managed_fleet, pools_by_node
from bench.simulated_agents import POOL, LoadPlan, LoadResult, PushShape, SimulatedNode, run_in_process
from collector.database import make_engine
from collector.sample_insert import sample_inserter, sample_row
from collector.tables import NO_DEVICE, samples
from fleetpilot.launch import ServerProcess
from migrations import runner
from wire.samples import WireSample

POSTGRES_ADMIN_URL = os.environ.get(
    "FLEETPILOT_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
BASELINE_CHUNK_ROWS = 10_000
TARGET_DEVICE_ROWS_PER_SECOND = 16_000
TARGET_P99_MS = 100.0
TARGET_RATIO = 0.5


def progress(message: str) -> None:
    print(f"[bench.ingest] {message}", file=sys.stderr, flush=True)


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
    workers: int | None = 1  # the server's --workers; None: its default (the cores, on PostgreSQL)

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
    )


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """A migrated, empty database: an SQLite file in ``folder``, or a new PostgreSQL database dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite:///{folder}/bench.db"
        runner.upgrade(url)
        yield url
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"fleetpilot_bench_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        runner.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def create_agent_tokens(server: ServerProcess, node_ids: list[str]) -> dict[str, str]:
    """One agent token per node through the REST API, as an operator would."""
    return {node_id: server.create_agent_token(node_id) for node_id in node_ids}


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


@contextmanager
def profiled(pid: int, target: Path | None, seconds: float) -> Iterator[None]:
    """Sample the server with py-spy for ``seconds`` while the block runs (nothing when ``target`` is None)."""
    if target is None:
        yield
        return
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    formats = {".svg": "flamegraph", ".txt": "raw", ".json": "speedscope"}
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(math.ceil(seconds)), "--rate", "100"]
    command += ["--subprocesses", "--nonblocking", "--output", str(target)]
    command += ["--format", formats.get(target.suffix, "flamegraph")]
    try:
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise SystemExit(f"--profile needs py-spy ({py_spy} not found): .venv/bin/pip install py-spy") from None
    try:
        yield
    finally:
        _out, err = spy.communicate(timeout=seconds + 30.0)
        if spy.returncode == 0:
            progress(f"profile of the server written to {target}")
        else:
            progress(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace').strip()[-300:]}")


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
        pools=pools,
    )
    snapshots: list[CpuSnapshot] = []
    with profiled(server.process.pid, config.profile, config.warmup_s + config.duration_s):
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


def baseline_rows(node_ids: list[str], pools: dict[str, str], shape: PushShape, count: int) -> list[dict[str, Any]]:
    """``count`` rows shaped like the pushed ones, passed through the server's own wire model and row builder."""
    nodes = [SimulatedNode(n, shape.gpus, seed, pools.get(n, POOL)) for seed, n in enumerate(node_ids)]
    rows: list[dict[str, Any]] = []
    now = time.time()
    while len(rows) < count:
        for node in nodes:
            rows.extend(sample_row(node.node_id, WireSample.model_validate(s)) for s in node.tick(now))
        now += 0.5
    return rows[:count]


def bulk_insert_rate(engine: Engine, rows: list[dict[str, Any]]) -> float:
    """Rows per second of the server's own sample insert (``collector.sample_insert.sample_inserter``), 10,000 rows a
    transaction."""
    insert = sample_inserter(engine.dialect.name)
    inserted = 0
    started = time.perf_counter()
    for first in range(0, len(rows), BASELINE_CHUNK_ROWS):
        with engine.begin() as conn:
            inserted += len(insert(conn, rows[first : first + BASELINE_CHUNK_ROWS]))
    elapsed = time.perf_counter() - started
    if inserted != len(rows):
        raise RuntimeError(f"baseline stored {inserted} of {len(rows)} rows")
    return inserted / elapsed


def raw_insert_rate(engine: Engine, rows: list[dict[str, Any]]) -> float:
    """Rows per second of a bare DBAPI ``executemany`` of the same rows, 10,000 a transaction: what the database
    itself takes with no SQLAlchemy per-row work in the way; context for the baseline."""
    columns = [column.name for column in samples.c]
    marker = "%s" if engine.dialect.name == "postgresql" else "?"
    names = ", ".join(f'"{c}"' for c in columns)
    markers = ", ".join([marker] * len(columns))
    sql = f"INSERT INTO samples ({names}) VALUES ({markers}) ON CONFLICT DO NOTHING"
    # The JSON column serialized before the clock starts, as the other inserts do inside it.
    data = [tuple(_raw_value(row, c) for c in columns) for row in rows]
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


def _raw_value(row: dict[str, Any], column: str) -> Any:
    value = row[column]
    return json.dumps(value) if column == "extra" and value is not None else value


def empty_samples(engine: Engine) -> None:
    """Empty the samples table so the baseline starts from the same empty table the server started from."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("TRUNCATE samples"))
        else:
            conn.execute(samples.delete())


def figure(value: float, digits: int) -> float | None:
    """A rounded number for the JSON line; None where there is none (NaN is not JSON)."""
    return None if math.isnan(value) else round(value, digits)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


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
    p99 = percentile(load.latencies_ms, 0.99)
    ratio = rows_per_second / baseline if baseline else math.nan
    return {
        "bench": "ingest",
        "backend": config.backend,
        "managed": config.managed,
        "rows_per_second": round(rows_per_second, 1),
        "device_rows_per_second": round(device_rows_per_second, 1),
        "samples_per_second": round(rows_per_second * shape.values / shape.rows, 1),
        "p50_ms": figure(percentile(load.latencies_ms, 0.50), 2),
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
