"""Time partitions on PostgreSQL: the scheme's periods and names, the job that creates them ahead, ingest's
idempotency across partitions, late and future samples, retention by dropping whole partitions, ``/series`` reading
only the partitions in range, and migration 0011 keeping every row both ways. SQLite keeps plain tables."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, event, insert, inspect, text

from collector.batch import SampleBatch
from collector.database import make_engine
from collector.ingest import SampleWriter
from collector.partitions import (
    ROLLUPS,
    SAMPLES,
    Partition,
    PartitionJob,
    is_partitioned,
    partitions_of,
    wholly_before,
)
from collector.retention import RetentionJob
from collector.series import SeriesQuery, query_series
from collector.tables import NO_POOL, metadata, rollups_1m
from migrations import runner
from tests.conftest import gpu_sample

T = 1_764_424_800.0  # 2025-11-29 14:00 UTC: a whole hour
HOUR = 3600.0
DAY = 86400.0


@pytest.fixture
def pg(postgres_url: str) -> Iterator[Engine]:
    """An empty schema on PostgreSQL from the metadata: partitioned tables with only their default partitions."""
    engine = make_engine(postgres_url)
    metadata.drop_all(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS partitions CASCADE"))
    metadata.create_all(engine)
    yield engine
    engine.dispose()


def write(engine: Engine, *samples: dict[str, Any]) -> tuple[int, int]:
    batch = SampleBatch.parse({"node_id": "node-a", "samples": list(samples)})
    result = SampleWriter(engine, late_after_seconds=1e9).write_batch(batch, received_at=T)
    return result.accepted, result.duplicates


def where_rows_are(engine: Engine, table: str = "samples", column: str = "ts") -> dict[float, str]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT {column}, tableoid::regclass::text FROM {table}"))
        return {float(ts): str(name).removeprefix("partitions.") for ts, name in rows}


def test_periods_and_names_follow_utc_hours_and_days() -> None:
    assert SAMPLES.period_start(T + 1799.5) == T
    assert SAMPLES.name(T) == "samples_p2025112914"
    assert ROLLUPS.name(T) == "rollups_1m_p20251129"
    assert ROLLUPS.period_start(T) == T - 14 * HOUR
    assert SAMPLES.starts_ahead(T + 10) == [T + k * HOUR for k in range(SAMPLES.ahead_periods + 1)]


@pytest.mark.parametrize(
    ("cutoff", "dropped"),
    [
        (T + 5400, ["a"]),  # b straddles the cutoff: it stays whole
        (T + 7200, ["a", "b"]),  # an upper bound at the cutoff holds only older rows
        (T + 3599, []),
    ],
)
def test_only_partitions_wholly_before_the_cutoff_go(cutoff: float, dropped: list[str]) -> None:
    partitions = [
        Partition("b", T + HOUR, T + 2 * HOUR),
        Partition("default", None, None),
        Partition("a", T, T + HOUR),
    ]
    assert [p.name for p in wholly_before(partitions, cutoff)] == dropped


def test_sqlite_keeps_plain_tables_and_the_job_does_nothing(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/plain.db")
    metadata.create_all(engine)
    try:
        assert PartitionJob(engine).run(now=T).created == ()
        with engine.connect() as conn:
            assert not is_partitioned(conn, "samples")
        assert write(engine, gpu_sample(1, T)) == (1, 0)
        assert write(engine, gpu_sample(1, T)) == (0, 1)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_job_creates_the_coming_partitions_once(pg: Engine) -> None:
    job = PartitionJob(pg)

    first = job.run(now=T + 10)
    again = job.run(now=T + 20)
    an_hour_on = job.run(now=T + HOUR + 10)

    hours = [SAMPLES.name(T + k * HOUR) for k in range(SAMPLES.ahead_periods + 1)]
    days = [ROLLUPS.name(ROLLUPS.period_start(T) + k * DAY) for k in range(ROLLUPS.ahead_periods + 1)]
    assert first.created == (*hours, *days)
    assert again.created == ()
    assert an_hour_on.created == (SAMPLES.name(T + (SAMPLES.ahead_periods + 1) * HOUR),)
    with pg.connect() as conn:
        attached = {p.name: (p.lower, p.upper) for p in partitions_of(conn, SAMPLES)}
    assert attached["samples_p2025112914"] == (T, T + HOUR)
    assert attached["samples_default"] == (None, None)


@pytest.mark.postgres
def test_a_resend_is_a_duplicate_and_stored_once(pg: Engine) -> None:
    PartitionJob(pg).run(now=T)
    body = [gpu_sample(i, T + HOUR - 10 + i) for i in range(20)]  # across the boundary of two partitions

    assert write(pg, *body) == (20, 0)
    assert write(pg, *body) == (0, 20)
    assert write(pg, *body[5:], gpu_sample(20, T + HOUR + 10)) == (1, 15)

    places = where_rows_are(pg)
    assert len(places) == 21
    assert set(places.values()) == {"samples_p2025112914", "samples_p2025112915"}


@pytest.mark.postgres
def test_late_and_future_samples_land_and_move_into_their_partition_when_it_comes(pg: Engine) -> None:
    PartitionJob(pg).run(now=T)
    old, soon, far = T - 30 * DAY, T + 290, T + 10 * HOUR  # far: past the partitions made ahead

    assert write(pg, gpu_sample(1, old), gpu_sample(2, soon), gpu_sample(3, far)) == (3, 0)
    assert where_rows_are(pg) == {old: "samples_default", soon: "samples_p2025112914", far: "samples_default"}

    created = PartitionJob(pg).run(now=far - HOUR).created  # its partition is due: the row moves in

    assert SAMPLES.name(far) in created
    assert where_rows_are(pg)[far] == SAMPLES.name(far)
    assert write(pg, gpu_sample(3, far), gpu_sample(1, old)) == (0, 2)
    assert len(where_rows_are(pg)) == 3


def seed_hours(engine: Engine) -> None:
    """A sample every 10 minutes over T..T+3h (partitions T, T+1h, T+2h), one a month old (default partition), and
    a rollup row every 6 hours over three days (daily partitions, the oldest day in the default)."""
    PartitionJob(engine).run(now=T)
    write(engine, *(gpu_sample(i, T + i * 600) for i in range(18)), gpu_sample(100, T - 30 * DAY))
    with engine.begin() as conn:
        conn.execute(
            insert(rollups_1m),
            [
                {"node_id": "node-a", "device": 0, "pool": NO_POOL, "bucket": T - 2 * DAY + k * 6 * HOUR, "samples": 1}
                for k in range(12)
            ],
        )


@pytest.mark.postgres
def test_retention_drops_whole_partitions_and_leaves_the_straddling_one_whole(pg: Engine) -> None:
    seed_hours(pg)
    job = RetentionJob(pg, raw_retention_seconds=HOUR, rollup_retention_seconds=DAY)

    report = job.run(now=T + 3.5 * HOUR)  # raw cutoff T + 2.5 h; rollup cutoff T − 20.5 h

    # hours T and T+1h dropped (12 rows), the month-old row deleted from the default; hour T+2h straddles: kept
    assert report.samples_deleted == 13
    assert sorted(where_rows_are(pg)) == [T + i * 600 for i in range(12, 18)]
    # rollups before 2025-11-29 (T − 14 h) sit in the default partition: those at T − 48, 42, 36, 30, 24 h are
    # before the cutoff and deleted by rows; T − 18 h stays; the day partition of T straddles the cutoff
    assert report.rollups_deleted == 5
    assert report.partitions_dropped == 2
    with pg.connect() as conn:
        names = {p.name for p in partitions_of(conn, SAMPLES)}
    assert not names & {SAMPLES.name(T), SAMPLES.name(T + HOUR)}
    assert SAMPLES.name(T + 2 * HOUR) in names

    again = job.run(now=T + 3.5 * HOUR)
    assert (again.samples_deleted, again.partitions_dropped, again.batches) == (0, 0, 0)


@pytest.mark.postgres
def test_a_partition_left_detached_is_dropped_and_counted_next_run(pg: Engine) -> None:
    seed_hours(pg)
    with pg.begin() as conn:  # what a run stopped between detach and drop leaves
        conn.execute(text(f"ALTER TABLE samples DETACH PARTITION partitions.{SAMPLES.name(T)}"))

    report = RetentionJob(pg, raw_retention_seconds=HOUR, rollup_retention_seconds=30 * DAY).run(now=T + 2.5 * HOUR)

    assert (report.samples_deleted, report.partitions_dropped) == (6 + 1, 1)
    with pg.connect() as conn:
        assert conn.scalar(text("SELECT to_regclass(:n)"), {"n": f"partitions.{SAMPLES.name(T)}"}) is None


@pytest.mark.postgres
@pytest.mark.slow
def test_retention_gives_up_on_a_busy_table_until_its_next_run(pg: Engine) -> None:
    """A long reader holds the table: the detach waits ``LOCK_TIMEOUT`` (2 s), not for the reader to finish, so
    ingest queued behind it waits no longer either."""
    seed_hours(pg)
    reading = pg.connect()
    reading.begin()
    reading.execute(text("SELECT count(*) FROM samples"))
    job = RetentionJob(pg, raw_retention_seconds=HOUR, rollup_retention_seconds=30 * DAY)
    try:
        started = time.monotonic()
        busy = job.run(now=T + 3.5 * HOUR)
        waited = time.monotonic() - started
    finally:
        reading.close()

    assert (busy.partitions_dropped, busy.samples_deleted) == (0, 1)  # only the default's row went
    assert 1.5 < waited < 10
    assert job.run(now=T + 3.5 * HOUR).partitions_dropped == 2


def explained_relations(conn: Connection, statement: str, parameters: Any) -> set[str]:
    """The tables and partitions PostgreSQL's plan for ``statement`` reads."""
    plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
    found: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            found.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    return found


def relations_read_by(engine: Engine, query: SeriesQuery, *, raw_max_seconds: float) -> set[str]:
    """Every relation the statements of one ``query_series`` call read, by EXPLAINing each as it was sent."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    with engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", capture)
        query_series(conn, query, raw_max_seconds=raw_max_seconds)
        event.remove(conn, "before_cursor_execute", capture)
        return set().union(*(explained_relations(conn, s, p) for s, p in sent))


@pytest.mark.postgres
def test_series_queries_read_only_the_partitions_in_their_range(pg: Engine) -> None:
    seed_hours(pg)
    metric = "gpu_utilization_ratio"

    raw = relations_read_by(pg, SeriesQuery(metric, start=T + HOUR + 60, end=T + HOUR + 1800), raw_max_seconds=HOUR)
    long = relations_read_by(pg, SeriesQuery(metric, start=T - 3 * HOUR, end=T + 2 * HOUR), raw_max_seconds=HOUR)

    assert raw == {"samples_p2025112915"}
    # rollups of day 2025-11-29 (the range starts there at 11:00), the raw samples of the last hour, whose end
    # (T + 2 h, inclusive) is the next partition's first instant, and job_state for the rollup watermark
    assert long == {"job_state", "rollups_1m_p20251129", "samples_p2025112915", "samples_p2025112916"}


def test_the_migration_keeps_every_row_both_ways(empty_database_url: str) -> None:
    url = empty_database_url
    runner.upgrade(url, "0010")
    now = time.time()
    times = [1000.0, now - 3 * DAY, now - 2 * HOUR, now - 10, now + 200]
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for seq, ts in enumerate(times):
                conn.execute(
                    text("INSERT INTO samples (node_id, seq, ts, device, pool) VALUES ('node-a', :seq, :ts, 0, '')"),
                    {"seq": seq, "ts": ts},
                )
            conn.execute(
                text("INSERT INTO rollups_1m (node_id, device, pool, bucket, samples) VALUES ('node-a', 0, '', :b, 3)"),
                [{"b": b} for b in (1020.0, now - DAY)],
            )
        before = _rows(engine)

        runner.upgrade(url)

        assert _rows(engine) == before
        with engine.connect() as conn:
            partitioned = is_partitioned(conn, "samples") and is_partitioned(conn, "rollups_1m")
        assert partitioned == engine.dialect.name.startswith("postgresql")
        if partitioned:
            places = where_rows_are(engine)
            assert places[1000.0] == "samples_default"
            assert places[now - 10] == SAMPLES.name(now - 10)
        assert write(engine, *(gpu_sample(seq, ts) for seq, ts in enumerate(times))) == (0, len(times))

        command.downgrade(runner.alembic_config(url), "0010")

        assert _rows(engine) == before
        assert inspect(engine).get_pk_constraint("samples")["constrained_columns"] == ["node_id", "seq"]
    finally:
        engine.dispose()


def _rows(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        raw = conn.execute(text("SELECT node_id, seq, ts FROM samples ORDER BY seq")).all()
        rolled = conn.execute(text("SELECT node_id, bucket, samples FROM rollups_1m ORDER BY bucket")).all()
    return [tuple(r) for r in raw], [tuple(r) for r in rolled]
