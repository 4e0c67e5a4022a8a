"""Retention benchmark (issue 18, part 5): ``python -m bench.retention [--quick] [--rows N] [--hours H]``.

On PostgreSQL, the same ``rows`` samples spread over ``hours`` whole hours go into two databases: one at migration
0010 (plain tables, today's retention deleting them in one-minute slices: the baseline) and one migrated to 0011
(hourly partitions, retention detaching and dropping them; the migration's copy is timed too). In each, the
retention job then removes all but the newest two hours while a writer thread ingests 20-sample batches through
``SampleWriter`` at a steady pace, and its per-batch latency is measured over a quiet stretch before and during
the run. Reported: rows removed per second each way and their ratio, and the writer's p99 in each phase. Progress
goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

from bench.lib.databases import POSTGRES_ADMIN_URL
from bench.lib.figures import figure, percentile_or_nan
from bench.lib.progress import progress_line
from collector.batch import SampleBatch
from collector.database import make_engine
from collector.ingest import SampleWriter
from collector.partitions import SAMPLES
from collector.retention import RetentionJob
from collector.tables import samples
from migrations import runner

KEPT_HOURS = 2
WRITER_BATCH = 20
WRITER_INTERVAL_S = 0.02  # 50 batches, 1,000 samples a second: a steady fleet, not a flood


progress = progress_line("retention")


@dataclass(frozen=True)
class RetentionConfig:
    rows: int
    hours: int
    quiet_s: float


def parse_config(argv: list[str] | None) -> RetentionConfig:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rows (under 60 s in all)")
    parser.add_argument("--rows", type=int, default=None, help="samples in each database (default 3,000,000)")
    parser.add_argument("--hours", type=int, default=6, help="whole hours the samples span")
    args = parser.parse_args(argv)
    rows = args.rows if args.rows is not None else (400_000 if args.quick else 3_000_000)
    if args.hours <= KEPT_HOURS or rows < args.hours:
        parser.error(f"--hours must exceed {KEPT_HOURS} and --rows must be at least --hours")
    return RetentionConfig(rows=rows, hours=args.hours, quiet_s=3.0 if args.quick else 8.0)


@contextmanager
def database(revision: str) -> Iterator[str]:
    """A new PostgreSQL database migrated to ``revision``, dropped afterwards."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"fleetpilot_bench_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        runner.upgrade(url, revision)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def fill(url: str, config: RetentionConfig, first_hour: float) -> None:
    """``rows`` GPU samples of 100 nodes evenly over the hours from ``first_hour``, generated in the database."""
    span = config.hours * 3600.0
    engine = make_engine(url)
    try:
        _fill(engine, config.rows, first_hour, span / config.rows)
    finally:
        engine.dispose()


def _fill(engine: Engine, rows: int, first_hour: float, step: float) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO samples (node_id, seq, ts, device, pool, gpu_utilization_ratio, gpu_memory_used_bytes,"
                " gpu_memory_bandwidth_utilization_ratio, gpu_power_watts, gpu_temperature_celsius)"
                " SELECT 'node-' || lpad((i % 100)::text, 3, '0'), i / 100, :first + i * :step, (i / 100) % 8, '',"
                " random(), random() * 8e10, random(), 100 + random() * 600, 30 + random() * 50"
                " FROM generate_series(0, :n - 1) AS i"
            ),
            {"first": first_hour, "step": step, "n": rows},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE samples"))  # as autovacuum would have left a day-old table


class PacedWriter:
    """Ingests a 20-sample batch every ``WRITER_INTERVAL_S`` in a thread, noting (start, latency) of each."""

    def __init__(self, engine: Engine) -> None:
        self._writer = SampleWriter(engine, late_after_seconds=1e9)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="paced-writer", daemon=True)
        self.latencies: list[tuple[float, float]] = []

    def __enter__(self) -> PacedWriter:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        seq = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            now = time.time()
            body = [
                {"seq": seq + i, "ts": now, "device": i % 8, "metrics": {"gpu_power_watts": 300.0}}
                for i in range(WRITER_BATCH)
            ]
            batch = SampleBatch.parse({"node_id": "writer", "samples": body})
            started = time.monotonic()
            self._writer.write_batch(batch, received_at=now)
            self.latencies.append((started, time.monotonic() - started))
            seq += WRITER_BATCH
            next_at += WRITER_INTERVAL_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def p99_ms(self, start: float, end: float) -> tuple[float, int]:
        """The p99 of the batches started in [start, end), in ms, and how many there were."""
        during = [latency * 1000 for at, latency in self.latencies if start <= at < end]
        return percentile_or_nan(during, 99), len(during)


@dataclass(frozen=True)
class Phase:
    """One database's retention run beside the writer."""

    removed: int
    seconds: float
    partitions_dropped: int
    p99_quiet_ms: float
    p99_during_ms: float
    batches_during: int

    @property
    def rows_per_second(self) -> float:
        return self.removed / self.seconds if self.seconds > 0 else float("nan")


def measure(url: str, config: RetentionConfig, cutoff: float) -> Phase:
    """The writer alone for ``quiet_s``, then the retention job removing everything before ``cutoff``."""
    engine = make_engine(url)
    try:
        job = RetentionJob(engine, raw_retention_seconds=86400.0, rollup_retention_seconds=86400.0 * 365)
        with PacedWriter(engine) as writer:
            quiet_from = time.monotonic()
            time.sleep(config.quiet_s)
            started = time.monotonic()
            report = job.run(now=cutoff + 86400.0)  # raw cutoff exactly ``cutoff``, a whole hour
            ended = time.monotonic()
            time.sleep(0.2)  # a batch the run held up finishes and is counted
        quiet = writer.p99_ms(quiet_from, started)
        during = writer.p99_ms(started, ended)
        with engine.connect() as conn:
            left = conn.scalar(select(func.count()).select_from(samples).where(samples.c.ts < cutoff))
        assert left == 0, f"{left} rows before the cutoff survived"
    finally:
        engine.dispose()
    return Phase(report.samples_deleted, ended - started, report.partitions_dropped, quiet[0], during[0], during[1])


def run(config: RetentionConfig) -> dict[str, Any]:
    first_hour = SAMPLES.period_start(time.time()) - config.hours * 3600.0
    cutoff = first_hour + (config.hours - KEPT_HOURS) * 3600.0
    progress(
        f"{config.rows:,} samples over {config.hours} h; removing those of the oldest {config.hours - KEPT_HOURS} h"
    )
    with database("0010") as url:
        fill(url, config, first_hour)
        progress("plain table (0010): deleting in one-minute slices")
        plain = measure(url, config, cutoff)
    with database("0010") as url:
        fill(url, config, first_hour)
        started = time.monotonic()
        runner.upgrade(url)
        migration_s = time.monotonic() - started
        progress(f"migrated to partitions in {migration_s:.1f} s; partitioned table: dropping partitions")
        parted = measure(url, config, cutoff)
    ratio = parted.rows_per_second / plain.rows_per_second
    return {
        "bench": "retention",
        "backend": "postgresql",
        "rows": config.rows,
        "hours": config.hours,
        "rows_removed": parted.removed,
        "drop_rows_per_second": figure(parted.rows_per_second, 0),
        "drop_seconds": figure(parted.seconds, 3),
        "partitions_dropped": parted.partitions_dropped,
        "delete_rows_per_second": figure(plain.rows_per_second, 0),
        "delete_seconds": figure(plain.seconds, 3),
        "ingest_p99_ms_quiet_plain": figure(plain.p99_quiet_ms, 1),
        "ingest_p99_ms_during_delete": figure(plain.p99_during_ms, 1),
        "ingest_batches_during_delete": plain.batches_during,
        "ingest_p99_ms_quiet_partitioned": figure(parted.p99_quiet_ms, 1),
        "ingest_p99_ms_during_drop": figure(parted.p99_during_ms, 1),
        "ingest_batches_during_drop": parted.batches_during,
        "migration_seconds": figure(migration_s, 1),
        "migration_rows_per_second": figure(config.rows / migration_s, 0),
        "baseline": figure(plain.rows_per_second, 0),
        "ratio": figure(ratio, 1),
    }


def main(argv: list[str] | None = None) -> int:
    summary = run(parse_config(argv))
    progress(
        f"drop {summary['drop_rows_per_second']} rows/s vs delete {summary['delete_rows_per_second']} rows/s"
        f" (ratio {summary['ratio']}); ingest p99 {summary['ingest_p99_ms_during_drop']} ms during the drop,"
        f" {summary['ingest_p99_ms_during_delete']} ms during the delete"
    )
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
