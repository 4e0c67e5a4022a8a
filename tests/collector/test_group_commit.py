"""Group commit: the batches of concurrent requests share one transaction, each answered after that commit with its
own exact counts (a resend in the same group is a duplicate); a batch past its pool bound, or one the database
refuses, fails alone; the database away fails the whole group, storing nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from collector.batch import SampleBatch
from collector.database import make_engine
from collector.errors import Overloaded, StorageUnavailable
from collector.group_rows import GroupRows
from collector.ingest import IngestResult, SampleWriter
from collector.pool_bound import PoolBound
from collector.tables import metadata, nodes, samples, series_latest
from tests.conftest import empty_schema

T0 = 1_764_424_800.0


@pytest.fixture
def engine(tmp_path: Any) -> Iterator[Engine]:
    made = make_engine(f"sqlite:///{tmp_path}/group.db")
    metadata.create_all(made)
    yield made
    made.dispose()


def batch(node: str, seqs: range, pool: str | None = None) -> SampleBatch:
    return SampleBatch.parse(
        {
            "node_id": node,
            "samples": [
                {"seq": s, "ts": T0 + s, "pool": pool, "metrics": {"request_rate_per_second": float(s)}} for s in seqs
            ],
        }
    )


def in_one_group(writer: SampleWriter, calls: list[Callable[[], IngestResult]]) -> list[IngestResult | BaseException]:
    """Run ``calls`` while the writer's turn is held, so all queue, then let them go: one of them writes them all."""
    outcomes: list[IngestResult | BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            outcomes[i] = calls[i]()
        except BaseException as exc:  # the test reads it
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with writer._writer_turn:
        for thread in threads:
            thread.start()
        while len(writer._queue) < len(calls):
            threading.Event().wait(0.01)
    for thread in threads:
        thread.join(10)
    assert all(o is not None for o in outcomes)
    return outcomes  # type: ignore[return-value]


def commits(engine: Engine) -> list[int]:
    counted = [0]

    @event.listens_for(engine, "commit")
    def _count(_conn: Any) -> None:
        counted[0] += 1

    return counted


def stored(engine: Engine, node: str) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).where(samples.c.node_id == node)) or 0)


def test_concurrent_batches_share_one_commit_with_exact_counts(engine: Engine) -> None:
    writer = SampleWriter(engine, late_after_seconds=1e9)
    writer.write_batch(batch("a", range(1, 4)), received_at=T0)  # seq 1..3 stored before
    counted = commits(engine)
    outcomes = in_one_group(
        writer,
        [
            lambda: writer.write_batch(batch("a", range(3, 7)), received_at=T0 + 10),  # 3 is a resend
            lambda: writer.write_batch(batch("b", range(1, 6)), received_at=T0 + 10),
            lambda: writer.write_batch(batch("a", range(5, 9)), received_at=T0 + 10),  # 5, 6 also in the first
        ],
    )
    assert counted == [1]  # three requests, one transaction
    assert outcomes == [IngestResult(3, 1), IngestResult(5, 0), IngestResult(2, 2)]
    assert (stored(engine, "a"), stored(engine, "b")) == (8, 5)
    with engine.connect() as conn:
        last = dict(conn.execute(select(nodes.c.id, nodes.c.last_seq)).all())
        latest = dict(conn.execute(select(series_latest.c.node_id, series_latest.c.request_rate_per_second)).all())
    assert last == {"a": 8, "b": 5}
    assert latest == {"a": 8.0, "b": 5.0}  # each node's newest sample, whichever batch carried it


def test_a_batch_past_its_pool_bound_loses_those_samples_alone(engine: Engine) -> None:
    writer = SampleWriter(engine, late_after_seconds=1e9)
    bound = PoolBound(max_pools=1, configured=lambda: [])
    outcomes = in_one_group(
        writer,
        [
            lambda: writer.write_batch(batch("a", range(1, 3), pool="p0"), received_at=T0, pools=bound),
            lambda: writer.write_batch(batch("a", range(3, 5), pool="p1"), received_at=T0, pools=bound),  # 2nd pool
            lambda: writer.write_batch(batch("b", range(1, 3), pool="p0"), received_at=T0, pools=bound),
        ],
    )
    assert outcomes[0] == IngestResult(2, 0) and outcomes[2] == IngestResult(2, 0)
    # the pool the group's first batch named counts, though unstored
    assert isinstance(outcomes[1], IngestResult) and (outcomes[1].accepted, outcomes[1].refused[0].pools) == (0, ["p1"])
    assert (stored(engine, "a"), stored(engine, "b")) == (2, 2)


def test_a_batch_the_database_refuses_fails_alone_and_the_others_are_stored(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = SampleWriter(engine, late_after_seconds=1e9)
    insert = writer._insert_samples

    def refusing(conn: Any, rows: GroupRows, only: Any) -> Any:
        if "bad" in rows.node_ids:
            raise IntegrityError("INSERT INTO samples", {}, Exception("CHECK constraint failed"))
        return insert(conn, rows, only)

    monkeypatch.setattr(writer, "_insert_samples", refusing)
    counted = commits(engine)
    outcomes = in_one_group(
        writer,
        [
            lambda: writer.write_batch(batch("a", range(1, 4)), received_at=T0),
            lambda: writer.write_batch(batch("bad", range(1, 4)), received_at=T0),
            lambda: writer.write_batch(batch("b", range(1, 4)), received_at=T0),
        ],
    )
    assert outcomes[0] == IngestResult(3, 0) and outcomes[2] == IngestResult(3, 0)
    assert isinstance(outcomes[1], IntegrityError)
    assert counted == [2]  # the group rolled back, then a and b each alone (bad's own attempt rolled back)
    assert (stored(engine, "a"), stored(engine, "bad"), stored(engine, "b")) == (3, 0, 3)


def test_the_database_away_fails_the_whole_group_and_stores_nothing(tmp_path: Any) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/away.db")  # no tables: every statement fails as an outage would
    writer = SampleWriter(engine, late_after_seconds=1e9)
    outcomes = in_one_group(
        writer,
        [
            lambda: writer.write_batch(batch("a", range(1, 3)), received_at=T0),
            lambda: writer.write_batch(batch("b", range(1, 3)), received_at=T0),
        ],
    )
    assert all(isinstance(o, StorageUnavailable) for o in outcomes)
    engine.dispose()


def test_a_batch_that_waited_past_the_deadline_is_not_written(
    engine: Engine,
) -> None:
    """Its agent would have timed out and resent it: stored, it would come back as duplicates. The batch queued
    after it, still in time, is written in the same turn."""
    writer = SampleWriter(engine, late_after_seconds=1e9, deadline_seconds=0.3)
    outcomes: dict[str, IngestResult | BaseException] = {}

    def write(node: str) -> None:
        try:
            outcomes[node] = writer.write_batch(batch(node, range(1, 4)), received_at=T0)
        except BaseException as exc:  # the test reads it
            outcomes[node] = exc

    late, in_time = threading.Thread(target=write, args=("late",)), threading.Thread(target=write, args=("soon",))
    with writer._writer_turn:  # a long commit under way
        late.start()
        while not writer._queue:
            threading.Event().wait(0.01)
        threading.Event().wait(0.4)
        in_time.start()
        while len(writer._queue) < 2:
            threading.Event().wait(0.01)
    late.join(10)
    in_time.join(10)
    assert isinstance(outcomes["late"], Overloaded) and "deadline 0.3 s" in str(outcomes["late"])
    assert outcomes["soon"] == IngestResult(3, 0)
    assert (stored(engine, "late"), stored(engine, "soon")) == (0, 3)


@pytest.mark.postgres
def test_postgresql_takes_a_group_by_binary_copy_with_the_same_exact_counts(postgres_url: str) -> None:
    """The binary COPY through the staging table skips a resend and counts it, within one group and against what is
    stored; a row the database refuses inside the COPY fails its own batch only."""
    with empty_schema(postgres_url) as postgres_engine:
        writer = SampleWriter(postgres_engine, late_after_seconds=1e9)
        assert writer.write_batch(batch("a", range(1, 151)), received_at=T0) == IngestResult(150, 0)
        outcomes = in_one_group(
            writer,
            [
                lambda: writer.write_batch(batch("a", range(101, 251)), received_at=T0),  # 50 resent, 100 new
                lambda: writer.write_batch(batch("b", range(1, 121)), received_at=T0),
                lambda: writer.write_batch(batch("b", range(100, 131)), received_at=T0),  # 21 in the group already
            ],
        )
        assert outcomes == [IngestResult(100, 50), IngestResult(120, 0), IngestResult(10, 21)]
        assert (stored(postgres_engine, "a"), stored(postgres_engine, "b")) == (250, 130)

        too_long = replace(batch("c", range(1, 121)), node_id="n" * 200)  # past varchar(128): only a COPY finds it
        outcomes = in_one_group(
            writer,
            [
                lambda: writer.write_batch(too_long, received_at=T0),
                lambda: writer.write_batch(batch("c", range(1, 121)), received_at=T0),
            ],
        )
        assert isinstance(outcomes[0], DBAPIError) and outcomes[1] == IngestResult(120, 0)
