"""The retention job: deletes exactly what is past the cutoffs, in short slices, and keeps everything else."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select

from collector.batch import SampleBatch
from collector.ingest import SampleWriter
from collector.node_reports import store_report
from collector.retention import RetentionJob
from collector.tables import NO_POOL, node_reports, replica_reports, rollup_backlog, rollups_1m, samples, series_latest
from tests.conftest import gpu_sample
from wire.control import NodeReport

T0 = 1_764_424_800.0  # a whole minute
HOUR = 3600.0


def write(engine: Engine, *samples_: dict[str, Any]) -> None:
    batch = SampleBatch.parse({"node_id": "node-a", "samples": list(samples_)})
    SampleWriter(engine, late_after_seconds=1e9).write_batch(batch, received_at=T0)


def seed(engine: Engine) -> None:
    """Samples every 20 s over T0..T0+600, rollups for minutes T0..T0+540, backlog for T0 and T0+300."""
    write(engine, *(gpu_sample(i, T0 + i * 20) for i in range(30)))
    with engine.begin() as conn:
        conn.execute(
            insert(rollups_1m),
            [
                {"node_id": "node-a", "device": 0, "pool": NO_POOL, "bucket": T0 + m * 60, "samples": 3}
                for m in range(10)
            ],
        )
        conn.execute(insert(rollup_backlog), [{"node_id": "node-a", "bucket": b} for b in (T0, T0 + 300)])


def column(engine: Engine, col: Any) -> list[float]:
    with engine.connect() as conn:
        return sorted(conn.scalars(select(col)))


def test_deletes_exactly_what_is_past_the_cutoffs_in_several_batches(engine: Engine) -> None:
    seed(engine)
    pauses: list[float] = []
    now = T0 + HOUR + 300
    job = RetentionJob(
        engine,
        raw_retention_seconds=HOUR,  # cutoff T0 + 300
        rollup_retention_seconds=HOUR + 60,  # cutoff T0 + 240
        pause_seconds=0.5,
        sleep=pauses.append,
    )

    report = job.run(now=now)

    # samples: 5 one-minute slices of 3; rollups: minutes T0..T0+180, one slice each; backlog: one statement
    assert (report.samples_deleted, report.rollups_deleted, report.backlog_deleted) == (15, 4, 1)
    assert report.batches == 5 + 4 + 1
    assert pauses == [0.5] * (report.batches - 1)
    assert column(engine, samples.c.ts) == [T0 + i * 20 for i in range(15, 30)]
    assert column(engine, rollups_1m.c.bucket) == [T0 + m * 60 for m in range(4, 10)]
    assert column(engine, rollup_backlog.c.bucket) == [T0 + 300]

    again = job.run(now=now)

    assert again == type(again)(0, 0, 0, 0)
    assert len(pauses) == report.batches - 1


def test_the_raw_cutoff_keeps_whole_minutes(engine: Engine) -> None:
    seed(engine)
    job = RetentionJob(engine, raw_retention_seconds=HOUR, rollup_retention_seconds=30 * 86400.0)

    # now - retention = T0 + 330, rounded down to T0 + 300: minute [T0+300, T0+360) keeps all its samples
    report = job.run(now=T0 + HOUR + 330)

    assert report.samples_deleted == 15
    assert column(engine, samples.c.ts)[0] == T0 + 300
    assert report.rollups_deleted == 0


def test_wider_slices_and_old_stragglers_take_few_batches(engine: Engine) -> None:
    seed(engine)
    write(engine, gpu_sample(100, T0 - 7 * 86400))  # a week older than the rest
    job = RetentionJob(engine, raw_retention_seconds=HOUR, rollup_retention_seconds=30 * 86400.0, batch_seconds=180)

    report = job.run(now=T0 + HOUR + 600)

    # the straggler is one slice, not 10 080 empty minutes; then [T0, T0+180), [T0+180, T0+360), [T0+360, T0+540),
    # [T0+540, T0+600)
    assert report.samples_deleted == 31
    assert report.batches == 1 + 4 + 1
    assert column(engine, samples.c.ts) == []


def test_leaves_latest_values_alone(engine: Engine) -> None:
    seed(engine)
    job = RetentionJob(engine, raw_retention_seconds=60.0, rollup_retention_seconds=60.0)

    report = job.run(now=T0 + 30 * 86400)

    assert (report.samples_deleted, report.rollups_deleted, report.backlog_deleted) == (30, 10, 2)
    with engine.connect() as conn:
        latest = conn.execute(select(series_latest.c.node_id, series_latest.c.ts)).all()
        assert conn.scalar(select(func.count()).select_from(samples)) == 0
    assert [tuple(row) for row in latest] == [("node-a", T0 + 29 * 20)]


def test_an_empty_database_needs_no_batch(engine: Engine) -> None:
    report = RetentionJob(engine, raw_retention_seconds=HOUR, rollup_retention_seconds=HOUR).run(now=T0)

    assert (report.samples_deleted, report.rollups_deleted, report.backlog_deleted, report.batches) == (0, 0, 0, 0)


@pytest.mark.parametrize("batch_seconds", [0.0, 45.0, 100.0])
def test_batches_must_be_whole_minutes(engine: Engine, batch_seconds: float) -> None:
    with pytest.raises(ValueError, match="batch_seconds"):
        RetentionJob(engine, raw_retention_seconds=HOUR, rollup_retention_seconds=HOUR, batch_seconds=batch_seconds)


def test_the_replica_history_goes_with_the_raw_samples_in_slices_and_the_latest_report_stays(engine: Engine) -> None:
    """``replica_reports`` is kept as long as the raw samples (capacity learning reads both over the same hours);
    the node's latest report stays whatever its age, as its latest values do."""
    for minute in range(10):  # one report a minute over T0..T0+540
        told = NodeReport.model_validate({"ts": T0 + minute * 60, "pools": {"chat": {"ready": minute}}})
        with engine.begin() as conn:
            store_report(conn, "node-a", told, received_at=T0 + minute * 60)
    job = RetentionJob(engine, raw_retention_seconds=HOUR, rollup_retention_seconds=30 * 86400.0)

    report = job.run(now=T0 + HOUR + 300)  # raw cutoff T0 + 300

    assert report.replica_reports_deleted == 5
    assert report.batches == 5  # a minute per slice, as for the samples
    assert column(engine, replica_reports.c.ts) == [T0 + m * 60 for m in range(5, 10)]
    later = job.run(now=T0 + 30 * 86400)
    assert later.replica_reports_deleted == 5
    assert column(engine, node_reports.c.ts) == [T0 + 540]
