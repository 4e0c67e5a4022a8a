"""Two ways PostgreSQL takes a group's samples, side by side: ``python -m bench.sample_insert [--quick]``.

For groups of 20, 200 and 2,000 rows (one request's batch, a few, a heavy group commit), the same fresh samples go
through the ``INSERT … SELECT FROM unnest(<an array per column>)`` the writer used for small groups before issue 38
(the baseline: the rows as dicts, each column's values gathered into a list per statement) and through the product's
binary ``COPY`` built from the columns (``collector.sample_insert``), alternately, each its own transaction on a
migrated (time-partitioned) database; the median of the timed rounds after a warm-up, the time of the insert call
alone for both. Progress goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from bench.lib.databases import fresh_database
from collector.batch import METRIC_COUNT, SampleBatch
from collector.database import make_engine
from collector.group_rows import GroupRows, group_rows
from collector.sample_insert import SAMPLE_COLUMNS, postgresql_inserter
from wire.catalog import METRIC_NAMES

SIZES = (20, 200, 2000)
WARMUP = 5
_ARRAY_TYPES = {"node_id": "varchar[]", "seq": "bigint[]", "device": "int[]", "pool": "varchar[]", "extra": "json[]"}


def batch_for(node: str, count: int, ts0: float, rng: random.Random) -> SampleBatch:
    """``count`` samples of one node: 8 GPUs' rows, 40 % of the metrics set."""
    values = np.full((count, METRIC_COUNT), np.nan)
    chosen = np.array([[rng.random() < 0.4 for _ in METRIC_NAMES] for _ in range(count)])
    values[chosen] = [rng.random() for _ in range(int(chosen.sum()))]
    return SampleBatch(
        node_id=node,
        seq=np.arange(1, count + 1, dtype=np.int64),
        ts=(ts0 + np.arange(1, count + 1) * 0.05).astype(np.float64),
        device=np.arange(1, count + 1, dtype=np.int32) % 8,
        pool=np.full(count, -1, dtype=np.int32),
        values=values,
    )


def dict_rows(rows: GroupRows) -> list[dict[str, Any]]:
    """The rows as the writer built them before issue 38: one dict per sample."""
    out = []
    for i in range(len(rows)):
        row: dict[str, Any] = {
            "node_id": rows.node_ids[rows.node[i]],
            "seq": int(rows.seq[i]),
            "ts": float(rows.ts[i]),
            "device": int(rows.device[i]),
            "pool": rows.pool_names[rows.pool[i]],
            "extra": None,
        }
        row.update(
            {name: (None if np.isnan(v) else float(v)) for name, v in zip(METRIC_NAMES, rows.values[i], strict=True)}
        )
        out.append(row)
    return out


def unnest_inserter() -> Callable[[Connection, list[dict[str, Any]]], int]:
    """The baseline: one ``INSERT … SELECT FROM unnest`` of an array per column, ``RETURNING`` the new keys."""
    columns = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
    arrays = ", ".join(f"CAST(:{c} AS {_ARRAY_TYPES.get(c, 'float8[]')})" for c in SAMPLE_COLUMNS)
    statement = text(
        f"INSERT INTO samples ({columns}) SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING RETURNING node_id, seq"
    )

    def insert(conn: Connection, rows: list[dict[str, Any]]) -> int:
        params = {c: [r[c] for r in rows] for c in SAMPLE_COLUMNS}
        return len({(node, seq) for node, seq in conn.execute(statement, params)})

    return insert


def run(rounds: int) -> dict[str, Any]:
    rng = random.Random(1)
    unnest, copy = unnest_inserter(), postgresql_inserter()
    sizes: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder, fresh_database("postgresql", Path(folder)) as url:
        engine = make_engine(url)
        ts0 = time.time() - 3600
        try:
            for size in SIZES:
                times: dict[str, list[float]] = {"unnest": [], "copy": []}
                for round_ in range(WARMUP + rounds):
                    for name, timed in times.items():  # alternated: a drift in the machine hits both
                        rows = group_rows([batch_for(f"{name}-{size}-{round_}", size, ts0, rng)])
                        prepared = dict_rows(rows) if name == "unnest" else None
                        started = time.perf_counter()
                        with engine.begin() as conn:
                            if prepared is not None:
                                new = unnest(conn, prepared)
                            else:
                                new = len(copy(conn, rows, np.arange(len(rows))))
                        if round_ >= WARMUP:
                            timed.append((time.perf_counter() - started) * 1000.0)
                        assert new == size, f"{name}: {new} of {size} rows new"
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
        "sizes": sizes,
        # the figure of the heaviest group: the binary COPY's time as a share of the baseline's (unnest)
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
