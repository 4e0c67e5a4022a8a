"""How a group commit's samples reach the ``samples`` table: each database's bulk insert that skips the ``(node_id,
seq)`` keys it already has and answers which rows were new (a resend counts as duplicate).

The ingest writer (:mod:`collector.ingest`) inserts a whole group's rows with one call, built from its columns
(:class:`~collector.group_rows.GroupRows`) without a dict per row; ``python -m bench.sample_insert`` times the
PostgreSQL path against the per-row ``unnest`` insert it replaced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from collector.group_rows import GroupRows
from collector.sample_copy import COPY_COLUMNS, binary_copy
from wire.catalog import METRIC_NAMES

SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "seq", "ts", "device", "pool", *METRIC_NAMES, "extra")
STAGING = "samples_staged"  # PostgreSQL: each connection's temporary table a group is copied into

# (connection, the group's rows, which of them to insert) → the inserted ones, a subset of ``only``
SampleInserter = Callable[[Connection, GroupRows, NDArray[np.intp]], NDArray[np.intp]]


def sample_inserter(dialect: str) -> SampleInserter:
    """How this database takes samples, ignoring ``(node_id, seq)`` it already has; answers the rows that were new.

    PostgreSQL: a binary ``COPY`` of the rows (:mod:`collector.sample_copy`) into a temporary staging table (this
    connection's, emptied at each commit), moved into ``samples`` with one ``INSERT … SELECT … ON CONFLICT DO
    NOTHING RETURNING`` whose keys come back as one packed value of their rows' places: three statements whatever
    the group's size, and no Python object per row either way. A ``COPY`` straight into ``samples`` cannot skip a
    resend. SQLite: the keys the group's nodes already hold in its seq range are read first (one writer: nothing
    slips in between), the rest go in one executemany.
    """
    if dialect == "postgresql":
        return postgresql_inserter()
    return sqlite_inserter()


def postgresql_inserter() -> SampleInserter:
    import psycopg  # the PostgreSQL driver, only where it is the database

    stored = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
    copied = ", ".join(f'"{c}"' for c in COPY_COLUMNS)
    create = (
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} (node_id varchar, seq int8, ts float8, device int4,"
        " pool varchar, metrics float8[], extra json, idx int4) ON COMMIT DELETE ROWS"
    )
    # NaN stands for an absent metric in the staged array (the wire refuses NaN itself): NULL in samples
    moved = ", ".join(
        [
            *(f'"{c}"' for c in SAMPLE_COLUMNS[:5]),
            *(f"NULLIF(metrics[{i + 1}], 'NaN')" for i in range(len(METRIC_NAMES))),
            "extra",
        ]
    )
    copy_in = f"COPY {STAGING} ({copied}) FROM STDIN (FORMAT BINARY)"
    # the new rows' places packed into one bytea (4 bytes each, big-endian): one value back, not a row per sample
    move = (
        f"WITH new AS (INSERT INTO samples ({stored}) SELECT {moved} FROM {STAGING}"
        f" ON CONFLICT DO NOTHING RETURNING node_id, seq)"
        f" SELECT string_agg(int4send(s.idx), '') FROM {STAGING} s JOIN new USING (node_id, seq)"
    )

    def insert(conn: Connection, rows: GroupRows, only: NDArray[np.intp]) -> NDArray[np.intp]:
        if not len(only):
            return only
        # in the connection's own transaction: the rows reach samples, or nothing does, at the group's commit
        conn.exec_driver_sql(create)  # a no-op after the connection's first copy (a rollback undoes it)
        try:
            with conn.connection.dbapi_connection.cursor() as cursor:  # type: ignore[union-attr]
                with cursor.copy(copy_in) as feed:
                    feed.write(binary_copy(rows, only))
                (packed,) = cursor.execute(move).fetchone() or (None,)
        except psycopg.Error as exc:  # raised as SQLAlchemy raises its own statements' (OperationalError, …)
            raise DBAPIError.instance(move, None, exc, psycopg.Error) from exc
        return np.sort(np.frombuffer(packed or b"", ">i4")).astype(np.intp)

    return insert


def sqlite_inserter() -> SampleInserter:
    columns = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
    insert_sql = f"INSERT INTO samples ({columns}) VALUES ({', '.join('?' * len(SAMPLE_COLUMNS))})"
    held_sql = "SELECT seq FROM samples WHERE node_id = ? AND seq BETWEEN ? AND ?"

    def insert(conn: Connection, rows: GroupRows, only: NDArray[np.intp]) -> NDArray[np.intp]:
        new = only[~_held(conn, held_sql, rows, only)]
        if len(new):
            conn.exec_driver_sql(insert_sql, sample_tuples(rows, new))
        return new

    return insert


def _held(conn: Connection, sql: str, rows: GroupRows, only: NDArray[np.intp]) -> NDArray[np.bool_]:
    """Which of the rows ``only`` have a key already stored, read per node over the seqs' range."""
    held = np.zeros(len(only), dtype=bool)
    nodes = rows.node[only]
    for node in np.unique(nodes).tolist():
        mine = nodes == node
        seqs = rows.seq[only][mine]
        params = (rows.node_ids[node], int(seqs.min()), int(seqs.max()))
        stored = np.fromiter((s for (s,) in conn.exec_driver_sql(sql, params)), dtype=np.int64)
        held[mine] = np.isin(seqs, stored)
    return held


def sample_tuples(rows: GroupRows, chosen: NDArray[np.intp]) -> list[tuple[Any, ...]]:
    """The rows ``chosen`` as tuples in ``SAMPLE_COLUMNS`` order, NULL where absent (SQLite's executemany)."""
    values = rows.values[chosen]
    cells = values.astype(object)
    cells[np.isnan(values)] = None
    extras = [rows.extras.get(i) for i in chosen.tolist()]
    return list(
        zip(
            [rows.node_ids[n] for n in rows.node[chosen].tolist()],
            rows.seq[chosen].tolist(),
            rows.ts[chosen].tolist(),
            rows.device[chosen].tolist(),
            [rows.pool_names[p] for p in rows.pool[chosen].tolist()],
            *cells.T.tolist(),
            [None if e is None else json.dumps(e) for e in extras],
            strict=True,
        )
    )
