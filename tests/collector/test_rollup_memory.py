"""The rollup job's memory is bounded by one chunk of samples, not by the range it rolls.

Before, a run loaded its whole range as rows in one 600 s chunk: the lookback's 11 minutes of 150 nodes × 8 GPUs at
2 Hz was ~1.8 GB at its peak, and the server grew by hundreds of MB a minute (docs/benchmarks.md, "soak").
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from sqlalchemy import Engine, delete, func, select

from collector.rollups import RollupJob, rollup_rows
from collector.sample_insert import SAMPLE_COLUMNS
from collector.tables import NO_DEVICE, NO_POOL, job_state, rollups_1m, samples
from wire.catalog import METRIC_NAMES

T0 = 1_764_424_800.0  # a whole minute
SERIES = 20  # 16 GPUs and 4 pools over 2 nodes, each sampled at 2 Hz


class CountedRow(Sequence[Any]):
    """A raw row that counts how many of its kind are alive at once."""

    alive: ClassVar[int] = 0
    most_alive: ClassVar[int] = 0

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values
        CountedRow.alive += 1
        CountedRow.most_alive = max(CountedRow.most_alive, CountedRow.alive)

    def __del__(self) -> None:
        CountedRow.alive -= 1

    def __getitem__(self, index: Any) -> Any:
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)


def raw_row(ts: float, device: int, power: float) -> tuple[Any, ...]:
    return ("node-a", device, NO_POOL, ts, *(power if name == "gpu_power_watts" else None for name in METRIC_NAMES))


def test_rollup_rows_keeps_no_row_it_has_read() -> None:
    def rows() -> Iterator[CountedRow]:
        for i in range(2_000):
            yield CountedRow(raw_row(T0 + i * 0.5, i % 4, float(i)))

    CountedRow.alive = CountedRow.most_alive = 0

    out = rollup_rows(rows())

    assert CountedRow.most_alive <= 2  # the row being folded in and, for a moment, the one before it
    assert len(out) == 4 * 17  # 4 GPUs × 1,000 s of samples: minutes T0 … T0 + 960
    assert sum(r["samples"] for r in out) == 2_000
    first = next(r for r in out if r["device"] == 0 and r["bucket"] == T0)
    assert first["gpu_power_watts_min"] == 0.0 and first["gpu_power_watts_max"] == 116.0


def sample_rows(minutes: int) -> list[dict[str, Any]]:
    """``minutes`` of 2 Hz samples of ``SERIES`` series: GPU rows on node-a and node-b, and a pool row on each."""
    rows: list[dict[str, Any]] = []
    seq = {"node-a": 0, "node-b": 0}
    for tick in range(minutes * 120):
        for series in range(SERIES):
            node = "node-a" if series % 2 else "node-b"
            seq[node] += 1
            row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
            gpu = series < 16
            row.update(node_id=node, seq=seq[node], ts=T0 + tick * 0.5, device=series // 2 if gpu else NO_DEVICE)
            row["pool"] = NO_POOL if gpu else f"pool-{series}"
            for name in ("gpu_power_watts", "gpu_utilization_ratio") if gpu else ("request_rate_per_second",):
                row[name] = float(tick % 7) / 7.0
            rows.append(row)
    return rows


def peak_traced_bytes(job: RollupJob, now: float) -> int:
    tracemalloc.start()
    try:
        job.run(now=now)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def forget_rollups(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(delete(rollups_1m))
        conn.execute(delete(job_state))


def count(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(table)) or 0)


def test_a_run_over_ten_minutes_peaks_about_as_high_as_a_run_over_one(engine: Engine) -> None:
    rows = sample_rows(minutes=10)  # 24,000 rows
    with engine.begin() as conn:
        conn.execute(samples.insert(), rows)
    job = RollupJob(engine)
    job.run(now=T0 + 61)  # warm-up: statements compiled and cached, connections pooled
    forget_rollups(engine)

    one_minute = peak_traced_bytes(job, now=T0 + 61)
    forget_rollups(engine)
    ten_minutes = peak_traced_bytes(job, now=T0 + 601)

    assert count(engine, rollups_1m) == 10 * SERIES
    # Rows held for the whole range would make this ~10×: every chunk's memory is let go before the next.
    assert ten_minutes < 2 * one_minute, (one_minute, ten_minutes)
