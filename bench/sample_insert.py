"""The two ways PostgreSQL takes a group's samples, side by side: ``python -m bench.sample_insert [--quick]``.

For groups of 20, 200 and 2,000 rows (one request's batch, a few, a heavy group commit), the same fresh rows go
through ``INSERT … SELECT FROM unnest(...)`` (the baseline) and through ``COPY`` into the staging table and one
``INSERT … SELECT``, alternately, each its own transaction on a migrated (time-partitioned) database; the median of
the timed rounds after a warm-up. The product picks unnest below ``collector.sample_insert.COPY_FROM_ROWS`` rows and
COPY from there. Progress goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.databases import fresh_database
from collector.database import make_engine
from collector.sample_insert import COPY_FROM_ROWS, SAMPLE_COLUMNS, SampleInserter, postgresql_inserter
from wire.catalog import METRIC_NAMES

SIZES = (20, 200, 2000)
WARMUP = 5


def rows_for(node: str, count: int, ts0: float, rng: random.Random) -> list[dict[str, Any]]:
    """``count`` samples of one node as ``sample_row`` makes them: 8 GPUs' rows, 40 % of the metrics set."""
    rows = []
    for seq in range(1, count + 1):
        row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
        row.update(node_id=node, seq=seq, ts=ts0 + seq * 0.05, device=seq % 8, pool="", extra=None)
        for name in METRIC_NAMES:
            if rng.random() < 0.4:
                row[name] = rng.random()
        rows.append(row)
    return rows


def run(rounds: int) -> dict[str, Any]:
    rng = random.Random(1)
    ways: dict[str, SampleInserter] = {
        "unnest": postgresql_inserter(copy_from_rows=sys.maxsize),
        "copy": postgresql_inserter(copy_from_rows=0),
    }
    sizes: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder, fresh_database("postgresql", Path(folder)) as url:
        engine = make_engine(url)
        ts0 = time.time() - 3600
        try:
            for size in SIZES:
                times: dict[str, list[float]] = {name: [] for name in ways}
                for round_ in range(WARMUP + rounds):
                    for name, insert in ways.items():  # alternated: a drift in the machine hits both
                        rows = rows_for(f"{name}-{size}-{round_}", size, ts0, rng)
                        started = time.perf_counter()
                        with engine.begin() as conn:
                            new = insert(conn, rows)
                        if round_ >= WARMUP:
                            times[name].append((time.perf_counter() - started) * 1000.0)
                        assert len(new) == size, f"{name}: {len(new)} of {size} rows new"
                unnest_ms, copy_ms = (statistics.median(times[n]) for n in ("unnest", "copy"))
                sizes[str(size)] = {
                    "unnest_ms": round(unnest_ms, 2),
                    "copy_ms": round(copy_ms, 2),
                    "ratio": round(copy_ms / unnest_ms, 3),
                }
                print(f"[bench.sample_insert] {size} rows: {sizes[str(size)]}", file=sys.stderr, flush=True)
        finally:
            engine.dispose()
    largest = sizes[str(SIZES[-1])]
    return {
        "bench": "sample_insert",
        "backend": "postgresql",
        "rounds": rounds,
        "copy_from_rows": COPY_FROM_ROWS,
        "sizes": sizes,
        # the figure of the heaviest group: COPY's time as a share of the baseline's (unnest)
        "baseline": largest["unnest_ms"],
        "ratio": largest["ratio"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sample_insert", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 timed rounds a size instead of 80")
    args = parser.parse_args(argv)
    print(json.dumps(run(20 if args.quick else 80)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
