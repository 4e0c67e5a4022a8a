"""time-partitioned samples and rollups

On PostgreSQL (issue 18, part 5), ``samples`` becomes range-partitioned by ``ts`` (an hour a partition) and
``rollups_1m`` by ``bucket`` (a day), each with a DEFAULT partition, every row kept (``collector/partitions.py`` says
why and how). The plain table is renamed aside, the partitioned one created in its place with its partitions, the
rows copied over, and the keys and indexes built once the rows are in (one sorted build per partition, not an
insert into four indexes per row); then the plain table is dropped. ``samples``' key becomes ``(node_id, seq, ts)``
— a partitioned table's key must hold its partition column — which every row already satisfies, since
``(node_id, seq)`` alone was unique. Partitions are cut for the periods from the oldest row's (at most the scheme's
``backfill_periods`` back) up to ``ahead_periods`` after now; older rows land in the default partition, which
retention empties row by row.

The copy holds the tables locked for its duration: stop ingest, or expect it to wait (docs/operations.md). SQLite
keeps its plain tables: a no-op there. Downgrade copies the rows back into plain tables; ``samples`` regains its
``(node_id, seq)`` key, keeping one row of any pair that shares a ``seq`` with different times.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 10:00:00.000000
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass

from alembic import op
from sqlalchemy import Connection, text

from collector.partitions import (
    PARTITION_SCHEMA,
    ROLLUPS,
    SAMPLES,
    PartitionScheme,
    create_partition,
    default_partition_statements,
)

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


@dataclass(frozen=True)
class Layout:
    """What a table carries besides its columns, as 0001 made it: primary key and indexes (name, columns)."""

    scheme: PartitionScheme
    plain_key: str
    partitioned_key: str
    indexes: tuple[tuple[str, str], ...]


LAYOUTS = (
    Layout(
        SAMPLES,
        plain_key="node_id, seq",
        partitioned_key="node_id, seq, ts",
        indexes=(
            ("ix_samples_node_id_samples_ts", "node_id, ts"),
            ("ix_samples_pool_samples_ts", "pool, ts"),
            ("ix_samples_ts", "ts"),
        ),
    ),
    Layout(
        ROLLUPS,
        plain_key="node_id, device, pool, bucket",
        partitioned_key="node_id, device, pool, bucket",
        indexes=(("ix_rollups_1m_bucket", "bucket"), ("ix_rollups_1m_pool_rollups_1m_bucket", "pool, bucket")),
    ),
)


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    now = time.time()
    for layout in LAYOUTS:
        _partition(conn, layout, now)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    for layout in LAYOUTS:
        _unpartition(conn, layout)
    conn.execute(text(f"DROP SCHEMA IF EXISTS {PARTITION_SCHEMA} CASCADE"))


def _set_aside(conn: Connection, layout: Layout, aside: str) -> None:
    """Rename the table to ``aside`` and free its key's and indexes' names for the table that replaces it."""
    table = layout.scheme.table
    conn.execute(text(f"ALTER TABLE {table} RENAME TO {aside}"))
    conn.execute(text(f"ALTER TABLE {aside} RENAME CONSTRAINT pk_{table} TO pk_{aside}"))
    for name, _columns in layout.indexes:
        conn.execute(text(f"DROP INDEX {name}"))


def _key_and_indexes(conn: Connection, layout: Layout, key: str) -> None:
    table = layout.scheme.table
    conn.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({key})"))
    for name, columns in layout.indexes:
        conn.execute(text(f"CREATE INDEX {name} ON {table} ({columns})"))


def _partition(conn: Connection, layout: Layout, now: float) -> None:
    scheme, aside = layout.scheme, f"{layout.scheme.table}_0010"
    _set_aside(conn, layout, aside)
    conn.execute(
        text(f"CREATE TABLE {scheme.table} (LIKE {aside} INCLUDING DEFAULTS) PARTITION BY RANGE ({scheme.column})")
    )
    for statement in default_partition_statements(scheme):
        conn.execute(text(statement))
    oldest = conn.scalar(text(f"SELECT min({scheme.column}) FROM {aside}"))
    current = first = scheme.period_start(now)
    if oldest is not None:
        first = min(current, scheme.period_start(max(float(oldest), now - scheme.backfill_periods * scheme.period_seconds)))
    past = round((current - first) / scheme.period_seconds)
    for k in range(past + scheme.ahead_periods + 1):
        create_partition(conn, scheme, first + k * scheme.period_seconds)
    conn.execute(text(f"INSERT INTO {scheme.table} SELECT * FROM {aside}"))
    _key_and_indexes(conn, layout, layout.partitioned_key)
    conn.execute(text(f"DROP TABLE {aside}"))


def _unpartition(conn: Connection, layout: Layout) -> None:
    scheme, aside = layout.scheme, f"{layout.scheme.table}_0011"
    _set_aside(conn, layout, aside)
    conn.execute(text(f"CREATE TABLE {scheme.table} (LIKE {aside} INCLUDING DEFAULTS)"))
    conn.execute(text(f"ALTER TABLE {scheme.table} ADD CONSTRAINT pk_{scheme.table} PRIMARY KEY ({layout.plain_key})"))
    keep_first = f"ORDER BY {layout.partitioned_key} ON CONFLICT DO NOTHING"
    conn.execute(text(f"INSERT INTO {scheme.table} SELECT * FROM {aside} {keep_first}"))
    for name, columns in layout.indexes:
        conn.execute(text(f"CREATE INDEX {name} ON {scheme.table} ({columns})"))
    conn.execute(text(f"DROP TABLE {aside}"))
