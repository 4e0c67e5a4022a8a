"""The 1-minute rollup job: exact reductions, NULL for absent metrics, open minute untouched, late data re-rolled."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, func, select

from collector.batch import SampleBatch
from collector.ingest import SampleWriter
from collector.rollups import RollupJob, bucket_start, rollup_rows
from collector.skipped_rows import Job, SkippedRows, skipped_rows_counter
from collector.tables import NO_POOL, job_state, rollup_backlog, rollup_column, rollups_1m
from tests.conftest import gpu_sample
from wire.catalog import METRIC_NAMES

T0 = 1_764_424_800.0  # a whole minute (29 407 080 × 60)


def raw(ts: float, node: str = "node-a", device: int = 0, pool: str = NO_POOL, **metrics: float) -> tuple[Any, ...]:
    """A raw row as the job reads it: series key, ts, then every catalog metric (None when absent)."""
    return (node, device, pool, ts, *(metrics.get(name) for name in METRIC_NAMES))


def write(engine: Engine, *samples_: dict[str, Any], received_at: float, late_after: float = 600.0) -> None:
    writer = SampleWriter(engine, late_after_seconds=late_after)
    batch = SampleBatch.parse({"node_id": "node-a", "samples": list(samples_)})
    writer.write_batch(batch, received_at=received_at)


def rollups(engine: Engine) -> dict[tuple[int, float], dict[str, Any]]:
    """node-a's rollup rows keyed by (device, bucket)."""
    with engine.connect() as conn:
        rows = conn.execute(select(rollups_1m).where(rollups_1m.c.node_id == "node-a")).mappings().all()
    return {(row["device"], row["bucket"]): dict(row) for row in rows}


def backlog(engine: Engine) -> list[tuple[str, float]]:
    with engine.connect() as conn:
        return [(r[0], r[1]) for r in conn.execute(select(rollup_backlog.c.node_id, rollup_backlog.c.bucket))]


def stats(row: dict[str, Any], metric: str) -> tuple[Any, ...]:
    return tuple(row[rollup_column(metric, s)] for s in ("min", "mean", "max", "p99"))


@pytest.mark.parametrize(
    ("ts", "start"),
    [(0.0, 0.0), (59.999, 0.0), (60.0, 60.0), (125.5, 120.0), (119.99999999999999, 60.0), (T0 + 59.5, T0)],
)
def test_bucket_start_is_the_minute_that_contains_ts(ts: float, start: float) -> None:
    assert bucket_start(ts) == start


def test_rollup_rows_reduce_each_metric_per_series_and_minute() -> None:
    # power 1..200 W over one minute: nearest-rank p99 is the 198th value, the mean 100.5
    rows = [raw(T0 + i * 0.25, gpu_power_watts=float(i + 1)) for i in range(200)]
    rows += [raw(T0 + 1.0, gpu_temperature_celsius=50.0), raw(T0 + 2.0, gpu_temperature_celsius=70.0)]
    rows += [raw(T0 + 61.0, gpu_power_watts=7.0), raw(T0 + 5.0, device=1, gpu_power_watts=3.0)]

    out = {(r["device"], r["bucket"]): r for r in rollup_rows(rows)}

    assert sorted(out) == [(0, T0), (0, T0 + 60), (1, T0)]
    first = out[(0, T0)]
    assert first["samples"] == 202
    assert stats(first, "gpu_power_watts") == (1.0, 100.5, 200.0, 198.0)
    assert stats(first, "gpu_temperature_celsius") == (50.0, 60.0, 70.0, 70.0)
    assert stats(first, "kv_cache_utilization_ratio") == (None, None, None, None)
    assert out[(0, T0 + 60)]["samples"] == 1
    assert stats(out[(0, T0 + 60)], "gpu_power_watts") == (7.0, 7.0, 7.0, 7.0)
    assert stats(out[(1, T0)], "gpu_power_watts") == (3.0, 3.0, 3.0, 3.0)


def test_rollup_rows_of_nothing_is_nothing() -> None:
    assert rollup_rows([]) == []


def test_rolls_a_known_minute_to_exact_values(engine: Engine) -> None:
    write(
        engine,
        *(gpu_sample(i, T0 + i * 0.25, gpu_power_watts=float(i + 1)) for i in range(200)),
        received_at=T0 + 50,
    )

    report = RollupJob(engine).run(now=T0 + 61)

    assert report.buckets_written == 1
    assert report.backlog_processed == 0
    assert report.watermark == T0 + 60
    row = rollups(engine)[(0, T0)]
    assert row["samples"] == 200
    assert row["pool"] == NO_POOL
    assert stats(row, "gpu_power_watts") == (1.0, 100.5, 200.0, 198.0)
    assert stats(row, "gpu_utilization_ratio") == (0.5, 0.5, 0.5, 0.5)
    with engine.connect() as conn:
        assert conn.scalar(select(job_state.c.watermark).where(job_state.c.name == "rollups_1m")) == T0 + 60


def test_a_metric_absent_from_a_minute_stays_null(engine: Engine) -> None:
    write(
        engine,
        gpu_sample(1, T0 + 5, gpu_power_watts=300.0),
        gpu_sample(2, T0 + 65),  # next minute: no power reading at all
        received_at=T0 + 70,
    )

    RollupJob(engine).run(now=T0 + 125)

    got = rollups(engine)
    assert stats(got[(0, T0)], "gpu_power_watts") == (300.0, 300.0, 300.0, 300.0)
    assert stats(got[(0, T0 + 60)], "gpu_power_watts") == (None, None, None, None)
    assert stats(got[(0, T0 + 60)], "gpu_temperature_celsius") == (None, None, None, None)
    assert got[(0, T0 + 60)]["gpu_memory_used_bytes_mean"] == 1e9


def test_the_open_minute_is_not_rolled_until_it_closes(engine: Engine) -> None:
    write(engine, gpu_sample(1, T0 + 10), gpu_sample(2, T0 + 70), received_at=T0 + 71)
    job = RollupJob(engine)

    first = job.run(now=T0 + 100)  # minute [T0+60, T0+120) is still open

    assert first.watermark == T0 + 60
    assert sorted(rollups(engine)) == [(0, T0)]

    second = job.run(now=T0 + 120)

    assert second.watermark == T0 + 120
    assert sorted(rollups(engine)) == [(0, T0), (0, T0 + 60)]


def test_rerunning_is_idempotent(engine: Engine) -> None:
    write(engine, *(gpu_sample(i, T0 + i * 7, gpu_power_watts=float(i)) for i in range(30)), received_at=T0 + 210)
    job = RollupJob(engine)

    job.run(now=T0 + 240)
    before = rollups(engine)
    again = job.run(now=T0 + 240)

    assert again.watermark == T0 + 240
    assert rollups(engine) == before
    assert sorted(before) == [(0, T0), (0, T0 + 60), (0, T0 + 120), (0, T0 + 180)]
    assert sum(row["samples"] for row in before.values()) == 30
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rollups_1m)) == 4


def test_a_late_sample_within_the_lookback_updates_its_minute(engine: Engine) -> None:
    write(engine, gpu_sample(1, T0 + 10, gpu_power_watts=100.0), received_at=T0 + 11)
    job = RollupJob(engine, lookback_seconds=600)
    job.run(now=T0 + 61)
    # four minutes later a delayed push brings another sample of minute T0
    write(engine, gpu_sample(2, T0 + 30, gpu_power_watts=300.0), received_at=T0 + 300)

    report = job.run(now=T0 + 300)

    row = rollups(engine)[(0, T0)]
    assert row["samples"] == 2
    assert stats(row, "gpu_power_watts") == (100.0, 200.0, 300.0, 300.0)
    assert report.backlog_processed == 0
    assert backlog(engine) == []


def test_a_sample_older_than_the_lookback_is_rerolled_from_the_backlog(engine: Engine) -> None:
    write(engine, gpu_sample(1, T0 + 10, gpu_power_watts=100.0), received_at=T0 + 11)
    write(engine, gpu_sample(2, T0 + 3610, gpu_power_watts=50.0), received_at=T0 + 3611)
    job = RollupJob(engine, lookback_seconds=600)
    assert job.run(now=T0 + 3700).watermark == T0 + 3660
    # a spool replayed an hour late: the ingest path marks minute T0 of node-a for the rollup job
    write(engine, gpu_sample(3, T0 + 20, gpu_power_watts=300.0), received_at=T0 + 3720, late_after=120.0)
    assert backlog(engine) == [("node-a", T0)]

    report = job.run(now=T0 + 3725)  # the lookback reaches back to T0 + 3060 only

    assert report.backlog_processed == 1
    assert backlog(engine) == []
    row = rollups(engine)[(0, T0)]
    assert row["samples"] == 2
    assert stats(row, "gpu_power_watts") == (100.0, 200.0, 300.0, 300.0)
    assert rollups(engine)[(0, T0 + 3600)]["samples"] == 1


def test_a_backlog_entry_of_the_open_minute_waits(engine: Engine) -> None:
    write(engine, gpu_sample(1, T0 + 70), received_at=T0 + 200, late_after=60.0)
    assert backlog(engine) == [("node-a", T0 + 60)]

    report = RollupJob(engine).run(now=T0 + 90)  # a clock behind the ingest's: T0 + 60 is still open here

    assert report.backlog_processed == 0
    assert backlog(engine) == [("node-a", T0 + 60)]
    assert rollups(engine) == {}


def test_a_first_run_starts_at_the_earliest_sample_and_skips_gaps_in_chunks(engine: Engine) -> None:
    # three hours between the two samples: only their minutes are rolled, chunk by chunk
    write(engine, gpu_sample(1, T0 + 5), gpu_sample(2, T0 + 10_805), gpu_sample(3, T0 + 10_925), received_at=T0)
    job = RollupJob(engine, chunk_seconds=120)

    report = job.run(now=T0 + 11_000)

    assert report.buckets_written == 3
    assert report.watermark == T0 + 10_980
    assert sorted(rollups(engine)) == [(0, T0), (0, T0 + 10_800), (0, T0 + 10_920)]


def test_nothing_to_roll_leaves_no_watermark(engine: Engine) -> None:
    report = RollupJob(engine).run(now=T0)

    assert (report.buckets_written, report.backlog_processed, report.watermark) == (0, 0, None)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(job_state)) == 0


@pytest.mark.parametrize("chunk_seconds", [0.0, 30.0, 90.0])
def test_chunks_must_be_whole_minutes(engine: Engine, chunk_seconds: float) -> None:
    with pytest.raises(ValueError, match="chunk_seconds"):
        RollupJob(engine, chunk_seconds=chunk_seconds)


def test_a_minute_that_cannot_be_reduced_is_skipped_and_counted_and_the_others_are_rolled(engine: Engine) -> None:
    """Two finite samples of 1.7e308 bytes overflow their minute's mean: that failed every run on the same range.
    Ingest refuses such values now; rows from before that (or written past ingest) must still not stop the job."""
    write(engine, gpu_sample(1, T0 + 5), received_at=T0 + 10)
    batch = SampleBatch.parse({"node_id": "node-b", "samples": [gpu_sample(s, T0 + s) for s in (1, 2)]})
    batch.values[:, METRIC_NAMES.index("gpu_memory_used_bytes")] = 1.7e308  # past the wire's bound: written past it
    SampleWriter(engine, late_after_seconds=600).write_batch(batch, received_at=T0 + 10)
    registry = CollectorRegistry()
    job = RollupJob(engine, skipped=SkippedRows(Job.ROLLUPS, skipped_rows_counter(registry)))

    report = job.run(now=T0 + 61)

    assert (report.buckets_written, report.watermark) == (1, T0 + 60)
    assert stats(rollups(engine)[(0, T0)], "gpu_utilization_ratio") == (0.5, 0.5, 0.5, 0.5)
    assert registry.get_sample_value("fleetpilot_jobs_skipped_rows_total", {"job": "rollups"}) == 1
