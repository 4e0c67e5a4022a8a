"""How samples reach the ``samples`` table: the row of one wire sample, and each database's bulk insert that skips
the ``(node_id, seq)`` keys it already has and answers the keys that were new (a resend counts as duplicate).

The ingest writer (:mod:`collector.ingest`) inserts a whole group commit's samples with one call;
``python -m bench.sample_insert`` times PostgreSQL's two paths side by side.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from collector.database import insert_for
from collector.tables import NO_DEVICE, NO_POOL, samples
from wire.catalog import METRIC_NAMES
from wire.samples import WireSample


def sample_row(node_id: str, sample: WireSample) -> dict[str, Any]:
    row: dict[str, Any] = {
        "node_id": node_id,
        "seq": sample.seq,
        "ts": sample.ts,
        "device": NO_DEVICE if sample.device is None else sample.device,
        "pool": NO_POOL if sample.pool is None else sample.pool,
        "extra": sample.extra or None,
    }
    values = sample.metrics
    for name in METRIC_NAMES:
        row[name] = getattr(values, name)
    return row


SampleInserter = Callable[[Connection, list[dict[str, Any]]], set[tuple[str, int]]]
SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "seq", "ts", "device", "pool", *METRIC_NAMES, "extra")
STAGING = "samples_staging"  # PostgreSQL: each connection's temporary table a group is copied into
COPY_FROM_ROWS = 100  # PostgreSQL: groups of this many rows and more are copied, smaller ones go through unnest
_POSTGRES_ARRAY_TYPES = {
    "node_id": "varchar[]",
    "seq": "bigint[]",
    "device": "int[]",
    "pool": "varchar[]",
    "extra": "json[]",
}


def sample_inserter(dialect: str) -> SampleInserter:
    """How this database takes samples, ignoring ``(node_id, seq)`` it already has; answers the keys that were new.

    PostgreSQL, by the group's size (``python -m bench.sample_insert`` measures both side by side):
    - up to ``COPY_FROM_ROWS`` rows, one ``INSERT … SELECT FROM unnest(<one array per column>)``: the same short
      statement every time, prepared once (a multi-row VALUES list is a new query to parse on every request);
    - from there, ``COPY`` into a temporary staging table (this connection's, emptied at each commit) moved with one
      ``INSERT … SELECT … ON CONFLICT DO NOTHING RETURNING``: 0.8 of unnest's time for 200 rows, 0.65 for 2,000, but
      1.1× for 20, where its second statement costs more than the arrays. A ``COPY`` straight into ``samples``
      cannot skip a resend.
    SQLite takes an executemany with RETURNING.
    """
    if dialect == "postgresql":
        return postgresql_inserter()
    statement_many = insert_for(dialect, samples).on_conflict_do_nothing().returning(samples.c.node_id, samples.c.seq)

    def insert_many(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, int]]:
        return {(node, seq) for node, seq in conn.execute(statement_many, rows)}

    return insert_many


def postgresql_inserter(copy_from_rows: int = COPY_FROM_ROWS) -> SampleInserter:
    """PostgreSQL's inserter (:func:`sample_inserter`); a benchmark or a test picks the path by ``copy_from_rows``."""
    import psycopg  # the PostgreSQL driver, only where it is the database

    columns = ", ".join(f'"{c}"' for c in SAMPLE_COLUMNS)
    arrays = ", ".join(f"CAST(:{c} AS {_POSTGRES_ARRAY_TYPES.get(c, 'float8[]')})" for c in SAMPLE_COLUMNS)
    unnest = text(
        f"INSERT INTO samples ({columns}) SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING RETURNING node_id, seq"
    )
    create = f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} (LIKE samples) ON COMMIT DELETE ROWS"
    copy = f"COPY {STAGING} ({columns}) FROM STDIN"
    move = (
        f"INSERT INTO samples ({columns}) SELECT {columns} FROM {STAGING} ON CONFLICT DO NOTHING RETURNING node_id, seq"
    )
    extra = SAMPLE_COLUMNS.index("extra")

    def insert(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[str, int]]:
        if len(rows) < copy_from_rows:
            params: dict[str, list[Any]] = {c: [r[c] for r in rows] for c in SAMPLE_COLUMNS}
            params["extra"] = [None if e is None else json.dumps(e) for e in params["extra"]]
            return {(node, seq) for node, seq in conn.execute(unnest, params)}
        # in the connection's own transaction: the rows reach samples, or nothing does, at the group's commit
        conn.exec_driver_sql(create)  # a no-op after the connection's first copy (a rollback undoes it)
        try:
            with conn.connection.dbapi_connection.cursor() as cursor, cursor.copy(copy) as feed:  # type: ignore[union-attr]
                for row in rows:
                    values = [row[c] for c in SAMPLE_COLUMNS]
                    if values[extra] is not None:
                        values[extra] = json.dumps(values[extra])
                    feed.write_row(values)
        except psycopg.Error as exc:  # raised as SQLAlchemy raises its own statements' (OperationalError, …)
            raise DBAPIError.instance(copy, None, exc, psycopg.Error) from exc
        return {(node, seq) for node, seq in conn.exec_driver_sql(move)}

    return insert
