"""Rollups from the write path: each process's minute aggregates equal what the rollup job reads back from the raw
samples, reach ``rollups_1m`` once the minute closed (merged with a later part), and a minute a dead process held is
rolled again from the raw samples."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, func, select

from collector.batch import SampleBatch
from collector.group_rows import group_rows
from collector.ingest import SampleWriter
from collector.minute_rollups import MinuteRollups
from collector.rollup_flush import RollupFlush
from collector.rollups import RAW_COLUMNS, RollupJob, rollup_rows
from collector.tables import job_state, nodes, rollup_backlog, rollup_pending, rollups_1m, samples
from wire.catalog import METRIC_NAMES

T0 = 1_764_424_800.0  # a whole minute


def sample(seq: int, ts: float, rng: random.Random, device: int | None = 0, pool: str | None = None) -> dict[str, Any]:
    names = ("gpu_power_watts", "gpu_utilization_ratio") if device is not None else ("queue_depth_requests",)
    metrics = {name: round(rng.uniform(0, 1), 4) for name in names if rng.random() < 0.9}  # now and then absent
    return {"seq": seq, "ts": ts, "device": device, "pool": pool, "metrics": metrics}


def minutes_of(rng: random.Random, node: str, minutes: int, first_seq: int = 1) -> SampleBatch:
    """Two GPUs and a pool at 2 Hz for ``minutes`` minutes: 120 samples a series and minute."""
    rows, seq = [], first_seq
    for tick in range(minutes * 120):
        for device, pool in ((0, None), (1, None), (None, "chat")):
            rows.append(sample(seq, T0 + tick * 0.5, rng, device, pool))
            seq += 1
    return SampleBatch.parse({"node_id": node, "samples": rows})


def reference(engine: Engine) -> dict[tuple[Any, ...], dict[str, Any]]:
    """What the rollup job makes of the stored raw samples."""
    with engine.connect() as conn:
        raw = conn.execute(select(*RAW_COLUMNS)).all()
    return {(r["node_id"], r["device"], r["pool"], r["bucket"]): r for r in rollup_rows(raw)}


def stored_rollups(engine: Engine) -> dict[tuple[Any, ...], dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(select(rollups_1m)).mappings().all()
    return {(r["node_id"], r["device"], r["pool"], r["bucket"]): dict(r) for r in rows}


def assert_same(got: dict[tuple[Any, ...], dict[str, Any]], expected: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        assert {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()} == got[key], key


def test_the_aggregates_of_rows_fed_in_parts_equal_the_rollups_of_the_raw_rows(engine: Engine) -> None:
    rng = random.Random(7)
    batch = minutes_of(rng, "node-a", minutes=2)
    rows = group_rows([batch])
    held = MinuteRollups("p1", flush_delay_seconds=10)
    everything = np.arange(len(rows))
    for part in np.array_split(everything, 7):  # as pushes come: a few seconds at a time
        held.add(rows, part)
    held.marked([T0, T0 + 60])
    with engine.begin() as conn:
        conn.execute(
            samples.insert(),
            [
                {
                    "node_id": "node-a",
                    "seq": int(rows.seq[i]),
                    "ts": float(rows.ts[i]),
                    "device": int(rows.device[i]),
                    "pool": rows.pool_names[rows.pool[i]],
                    **{
                        n: (None if np.isnan(v) else float(v))
                        for n, v in zip(METRIC_NAMES, rows.values[i], strict=True)
                    },
                }
                for i in everything
            ],
        )
    closed = held.take_closed(T0 + 131)  # both minutes closed over 10 s ago
    assert closed.buckets == [T0, T0 + 60] and held.held_minutes == 0
    got = {(r["node_id"], r["device"], r["pool"], r["bucket"]): r for r in closed.rows()}
    assert_same(got, reference(engine))


def test_only_minutes_closed_a_flush_delay_ago_are_taken() -> None:
    held = MinuteRollups("p1", flush_delay_seconds=10)
    rows = group_rows([minutes_of(random.Random(1), "node-a", minutes=1)])
    held.add(rows, np.arange(len(rows)))
    held.marked([T0])
    assert held.take_closed(T0 + 65).buckets == []  # closed 5 s ago
    assert held.take_closed(T0 + 71).buckets == [T0]


def writer_with(engine: Engine, held: MinuteRollups) -> SampleWriter:
    return SampleWriter(engine, late_after_seconds=120, rollups=held)


def test_written_rows_reach_rollups_1m_at_the_flush_and_a_later_part_merges(engine: Engine) -> None:
    rng = random.Random(3)
    held = MinuteRollups("p1")
    writer = writer_with(engine, held)
    first, second = minutes_of(rng, "node-a", minutes=1), minutes_of(rng, "node-a", minutes=1, first_seq=1000)
    writer.write_batch(first.take(first.ts < T0 + 40), received_at=T0 + 45)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rollup_pending)) == 1  # marked with the rows
    flush = RollupFlush(engine, held)
    assert flush.run(T0 + 75) == 3
    writer.write_batch(first.take(first.ts >= T0 + 40), received_at=T0 + 80)  # within the lateness bound
    flush.run(T0 + 90)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rollup_pending)) == 0
        assert conn.scalar(select(func.count()).select_from(rollup_backlog)) == 0
    got, expected = stored_rollups(engine), reference(engine)
    for key, row in expected.items():  # two parts: counts, min, max exact; the mean weighted by samples
        for column in ("samples", "gpu_power_watts_min", "gpu_power_watts_max", "queue_depth_requests_max"):
            assert got[key][column] == pytest.approx(row[column]), (key, column)
        if row["gpu_power_watts_mean"] is not None:
            assert got[key]["gpu_power_watts_mean"] == pytest.approx(row["gpu_power_watts_mean"], rel=0.05)
    writer.write_batch(second.take(second.ts < T0 + 10), received_at=T0 + 300)  # past the bound: the backlog
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rollup_backlog)) == 1
        assert conn.scalar(select(func.count()).select_from(rollup_pending)) == 0


def test_the_job_rolls_a_dead_processs_minute_from_raw_and_its_watermark_waits_for_held_minutes(
    engine: Engine,
) -> None:
    rng = random.Random(5)
    survivor, dead = MinuteRollups("alive"), MinuteRollups("dead")
    writer_with(engine, survivor).write_batch(minutes_of(rng, "node-a", minutes=1), received_at=T0 + 61)
    writer_with(engine, dead).write_batch(minutes_of(rng, "node-b", minutes=1), received_at=T0 + 61)
    RollupFlush(engine, survivor).run(T0 + 75)  # "dead" never flushes: its aggregates die with it
    job = RollupJob(engine, settle_seconds=180)
    report = job.run(T0 + 100)  # first run: nothing older than the held minute to roll
    assert report.watermark == T0
    report = job.run(T0 + 60 + 180 + 61)  # node-b's minute is still pending a minute past the settle
    assert report.watermark == T0 + 60 + 180 + 60
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rollup_pending)) == 0
        assert conn.scalar(select(job_state.c.watermark)) == report.watermark
    assert_same(stored_rollups(engine), reference(engine))


def test_a_remote_write_nodes_backlog_minute_is_rolled_once_closed_an_agents_once_settled(engine: Engine) -> None:
    rng = random.Random(7)
    job = RollupJob(engine, settle_seconds=180)
    job.run(T0 - 60)  # the first run: no history yet
    writer = writer_with(engine, MinuteRollups("p1"))
    for node in ("node-a", "node-r"):  # both late: through the backlog, rolled from the raw samples
        writer.write_batch(minutes_of(rng, node, minutes=1), received_at=T0 + 300)
    with engine.begin() as conn:
        conn.execute(nodes.update().where(nodes.c.id == "node-r").values(source="remote_write"))
    job.run(T0 + 75)  # the minute closed 15 s ago: no process holds a remote node's minutes, an agent's may
    assert {key[0] for key in stored_rollups(engine)} == {"node-r"}
    job.run(T0 + 60 + 180)
    assert_same(stored_rollups(engine), reference(engine))
