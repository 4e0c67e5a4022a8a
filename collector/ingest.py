"""The hot ingest path: validated batches become transactions of Core bulk statements, several batches a commit.

Per batch: insert the samples ignoring ``(node_id, seq)`` conflicts (a resend counts as duplicate;
:mod:`collector.sample_insert`), upsert the node (registration and liveness), upsert the latest value of each series
touched, note rollup buckets the rollup job has already passed, and store the node's report (the latest per node,
and one replica row per pool of it; :mod:`collector.node_reports`).

Group commit: what costs is the work per request and per transaction, not per row, so the batches of concurrent
requests share one. Each request queues its batch and takes the process's write turn; whoever holds the turn writes
every batch queued by then in one transaction — one insert of all their samples (its RETURNING says which rows
were new, so each batch's duplicates are counted exactly), one node upsert, one latest-values upsert — and hands
each its result; a request whose batch was written by another finds its result when its turn comes. The caller
answers the agent only after ``write_batch`` returns, i.e. after the commit. The samples of a batch's pools past its
bound are left out, the rest written (``collector.pool_bound``); should the group's transaction fail on a
constraint, each batch is written alone, so one bad batch fails by itself; the database being away fails them all
(``StorageUnavailable``).

Overload: a batch that has waited past ``deadline_seconds`` since its request arrived, when its group forms, is not
written (``Overloaded``). Its agent would time out before the answer came and resend it: committing it would turn
the wait into duplicates, which is how a backlogged server used to spiral (docs/benchmarks.md, "soak").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import ColumnElement, Connection, Engine, Insert, case, func
from sqlalchemy.exc import DBAPIError

from collector.batch import SampleBatch
from collector.database import insert_for, storage_errors
from collector.errors import Overloaded
from collector.group_rows import (
    GroupRows,
    first_of_each_key,
    group_rows,
    late_buckets,
    late_rows,
    latest_rows,
    node_upserts,
)
from collector.minute_rollups import MinuteRollups
from collector.node_reports import ReportStatements
from collector.pool_bound import PoolBound, PoolsSeen, within_pool_bound
from collector.sample_insert import sample_inserter
from collector.tables import (
    AGENT_SOURCE,
    ROLLUP_BUCKET_SECONDS,
    devices,
    nodes,
    rollup_backlog,
    rollup_pending,
    series_latest,
)
from wire.catalog import METRIC_NAMES
from wire.refusals import Refusal
from wire.samples import WireInventory


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    duplicates: int
    refused: tuple[Refusal, ...] = ()  # samples of the batch left out alone (wire.refusals)


@dataclass(eq=False)
class _Queued:
    """One request's batch waiting for a group commit, and then its outcome."""

    batch: SampleBatch
    received_at: float
    pools: PoolBound | None
    queued_at: float  # time.monotonic() when its request came through the door: the deadline counts from there
    refused: tuple[Refusal, ...] = ()
    result: IngestResult | None = None
    error: BaseException | None = None
    done: bool = field(default=False)


class SampleWriter:
    """Writes batches for the ingest endpoint, several a commit (module docstring); ``late_after_seconds`` is how far
    behind the rollup job may be."""

    def __init__(
        self,
        engine: Engine,
        *,
        late_after_seconds: float,
        deadline_seconds: float = 5.0,
        rollups: MinuteRollups | None = None,
    ) -> None:
        self._engine = engine
        self._rollups = rollups  # the write path's minute aggregates (None: the rollup job reads the raw samples)
        self._late_after_seconds = late_after_seconds
        self._deadline_seconds = deadline_seconds
        dialect = engine.dialect.name
        self._insert_samples = sample_inserter(dialect)
        # One writer per process: the turn holder commits every queued batch (on SQLite, whose single writer makes
        # colliding threads sleep in its busy handler, it also keeps them from colliding).
        self._writer_turn = threading.Lock()
        self._queue: list[_Queued] = []
        self._queue_lock = threading.Lock()
        self._pools_seen = PoolsSeen()
        self._upsert_latest = latest_upsert(dialect)
        node = insert_for(dialect, nodes)
        self._upsert_node = node.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "last_seen": node.excluded.last_seen,
                "last_sample_ts": later_of(nodes.c.last_sample_ts, node.excluded.last_sample_ts),
                "last_seq": later_of(nodes.c.last_seq, node.excluded.last_seq),
                # an agent's batch makes the node the agent's, one a Prometheus reported until now included
                "source": AGENT_SOURCE,
                "resolution_seconds": None,
            },
        )
        self._register_node = insert_for(dialect, nodes).on_conflict_do_nothing(index_elements=["id"])
        self._mark_backlog = backlog_upsert(dialect)
        self._mark_pending = insert_for(dialect, rollup_pending).on_conflict_do_nothing()
        self._store_report = ReportStatements(dialect)
        device = insert_for(dialect, devices)
        self._upsert_devices = device.on_conflict_do_update(
            index_elements=["node_id", "index"],
            set_={
                c: device.excluded[c] for c in ("name", "uuid", "memory_total_bytes", "driver_version", "updated_at")
            },
        )

    def write_batch(
        self, batch: SampleBatch, *, received_at: float, pools: PoolBound | None = None, arrived: float | None = None
    ) -> IngestResult:
        """Store ``batch`` but the samples of its pools past ``pools`` (named in the result), committed (maybe with
        others) before this returns; raises ``StorageUnavailable`` when the database is away, and ``Overloaded``
        (nothing stored) when it waited past the deadline since ``arrived`` (``time.monotonic()`` at the door)."""
        queued = _Queued(batch, received_at, pools, time.monotonic() if arrived is None else arrived)
        with self._queue_lock:
            self._queue.append(queued)
        with self._writer_turn:
            if not queued.done:  # nobody wrote it yet: write it, and every batch queued since
                with self._queue_lock:
                    group, self._queue = self._queue, []
                in_time = self._in_time(group)
                if in_time:
                    self._commit(in_time)
        if queued.error is not None:
            raise queued.error
        assert queued.result is not None
        return queued.result

    def _in_time(self, group: list[_Queued]) -> list[_Queued]:
        """The batches still within their deadline; each late one gets ``Overloaded`` and is not written."""
        now = time.monotonic()
        in_time = []
        for queued in group:
            waited = now - queued.queued_at
            if waited > self._deadline_seconds:
                queued.error = Overloaded(f"waited {waited:.1f} s for a commit (deadline {self._deadline_seconds:g} s)")
                queued.done = True
            else:
                in_time.append(queued)
        return in_time

    def _commit(self, group: list[_Queued]) -> None:
        """One transaction for ``group``; on a constraint error with several batches, each alone."""
        try:
            with storage_errors(), self._engine.begin() as conn:
                self._bound_pools(conn, group)
                results, fold = self._write(conn, group)
        except DBAPIError:
            if len(group) == 1:
                raise
            for queued in group:  # the bad batch fails alone
                queued.error = None
                try:
                    self._commit([queued])
                except BaseException as exc:  # handed to its own request, raised there
                    queued.error = exc
                queued.done = True
            return
        except BaseException as exc:  # the database away: every request of the group hears it
            for queued in group:
                queued.error = queued.error or exc
                queued.done = True
            return
        if fold is not None:
            fold()  # committed: the rows reach this process's minute aggregates
        for queued, result in zip(group, results, strict=True):
            queued.result = result
            queued.done = True

    def _bound_pools(self, conn: Connection, group: list[_Queued]) -> None:
        """Take out of each batch the samples and report entries of its pools past its bound, noting the refusal."""
        in_group: dict[str, set[str]] = {}  # pools the batches admitted before named, by node
        for queued in group:
            if queued.pools is not None:
                queued.batch, refusal = within_pool_bound(conn, queued.batch, queued.pools, self._pools_seen, in_group)
                if refusal is not None:  # a batch written alone after a failed group was trimmed already
                    queued.refused = (refusal,)

    def _write(self, conn: Connection, group: list[_Queued]) -> tuple[list[IngestResult], Callable[[], None] | None]:
        """Write the group in ``conn``'s transaction; its results, and what to do once it is committed."""
        for queued in group:
            batch = queued.batch
            if batch.inventory is not None:
                self._write_inventory(conn, batch.node_id, batch.inventory, queued.received_at)
        reports = [(q.batch.node_id, q.batch.report, q.received_at) for q in group if q.batch.report is not None]
        if reports:
            self._store_report.many(conn, reports)
        empty = [q for q in group if not len(q.batch)]
        if empty:
            conn.execute(
                self._register_node,
                [{"id": q.batch.node_id, "first_seen": q.received_at, "last_seen": q.received_at} for q in empty],
            )
        rows = group_rows([q.batch for q in group])
        if not len(rows):
            return [IngestResult(0, 0, q.refused) for q in group], None
        new = self._insert_samples(conn, rows, first_of_each_key(rows))
        conn.execute(self._upsert_node, node_upserts(rows, [(q.batch.node_id, q.received_at) for q in group]))
        timely = self._mark_late(conn, rows, new, group)
        latest = latest_rows(rows, new, updated_at=time.time())
        if latest:
            conn.execute(self._upsert_latest, latest)
        results = [_result(rows, new, span, q.refused) for q, span in zip(group, rows.spans, strict=True)]
        return results, self._fold_later(conn, rows, timely)

    def _mark_late(
        self, conn: Connection, rows: GroupRows, new: NDArray[np.intp], group: list[_Queued]
    ) -> NDArray[np.intp]:
        """Note the (node, minute) pairs of late new rows (``late_rows``) for the rollup job to roll again from the
        raw samples; answer the new rows that are not late."""
        marks: set[tuple[str, float]] = set()
        timely = []
        for queued, span in zip(group, rows.spans, strict=True):
            mine = new[(new >= span.start) & (new < span.stop)]
            late_before = queued.received_at - self._late_after_seconds
            marks.update((queued.batch.node_id, bucket) for bucket in late_buckets(rows, mine, late_before))
            timely.append(mine[~late_rows(rows, mine, late_before)])
        if marks:
            conn.execute(self._mark_backlog, [{"node_id": n, "bucket": b} for n, b in sorted(marks)])
        return np.concatenate(timely) if timely else new[:0]

    def _fold_later(self, conn: Connection, rows: GroupRows, timely: NDArray[np.intp]) -> Callable[[], None] | None:
        """Mark the minutes this process starts holding (``rollup_pending``, in the group's transaction), and answer
        what folds the rows into its minute aggregates once the group is committed."""
        rollups = self._rollups
        if rollups is None or not len(timely):
            return None
        buckets = np.floor_divide(rows.ts[timely], ROLLUP_BUCKET_SECONDS) * ROLLUP_BUCKET_SECONDS
        opened = rollups.unmarked(set(buckets.tolist()))
        if opened:
            conn.execute(self._mark_pending, [{"holder": rollups.holder, "bucket": b} for b in opened])

        def fold() -> None:
            rollups.marked(opened)
            rollups.add(rows, timely)

        return fold

    def _write_inventory(self, conn: Connection, node_id: str, inventory: WireInventory, now: float) -> None:
        node = insert_for(conn.dialect.name, nodes)
        conn.execute(
            node.on_conflict_do_update(
                index_elements=["id"],
                set_={"hostname": node.excluded.hostname, "agent_version": node.excluded.agent_version},
            ),
            [
                {
                    "id": node_id,
                    "hostname": inventory.hostname,
                    "agent_version": inventory.agent_version,
                    "first_seen": now,
                    "last_seen": now,
                }
            ],
        )
        if inventory.gpus:
            conn.execute(
                self._upsert_devices,
                [{"node_id": node_id, **gpu.model_dump(), "updated_at": now} for gpu in inventory.gpus],
            )


def _result(rows: GroupRows, new: NDArray[np.intp], span: slice, refused: tuple[Refusal, ...]) -> IngestResult:
    """A batch's outcome: its rows new in this commit accepted, the rest duplicates (stored before, or earlier in the
    group: a key new in the commit is the first batch's that carries it)."""
    accepted = int(((new >= span.start) & (new < span.stop)).sum())
    return IngestResult(accepted, span.stop - span.start - accepted, refused)


def latest_upsert(dialect: str) -> Insert:
    """Each series' latest values, replaced only by a row at least as new (a replayed spool never goes back)."""
    latest = insert_for(dialect, series_latest)
    return latest.on_conflict_do_update(
        index_elements=["node_id", "device", "pool"],
        set_={name: latest.excluded[name] for name in ("ts", *METRIC_NAMES, "extra", "updated_at")},
        where=series_latest.c.ts <= latest.excluded.ts,
    )


def backlog_upsert(dialect: str) -> Insert:
    """A (node, minute) the rollup job must roll again. DO UPDATE (not DO NOTHING) takes the row lock on PostgreSQL,
    so this commit cannot slip between the rollup job deleting a backlog row and reading that minute's samples."""
    backlog = insert_for(dialect, rollup_backlog)
    return backlog.on_conflict_do_update(index_elements=["node_id", "bucket"], set_={"bucket": backlog.excluded.bucket})


def later_of(stored: ColumnElement[Any], incoming: ColumnElement[Any]) -> ColumnElement[Any]:
    """In an upsert, the larger of the stored and the incoming value, the incoming one where none is stored."""
    return func.coalesce(case((incoming > stored, incoming), else_=stored), incoming)
