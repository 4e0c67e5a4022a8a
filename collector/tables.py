"""SQLAlchemy tables of the collector: nodes, devices, raw samples, latest values, 1-minute rollups.

Every table of the product hangs on ``metadata`` (higher rooms add theirs to it); Alembic compares against it.
Series keys use ``device = -1`` for "no GPU" and ``pool = ''`` for "no pool" so that the key columns can be part of
primary keys on every database (a NULL never conflicts with another NULL).
Times are Unix seconds (``Double``).

On PostgreSQL ``samples`` and ``rollups_1m`` are range-partitioned by time (``collector.partitions``; migration 0011).
A partitioned table's unique keys must hold its partition column, so the key of ``samples`` is ``(node_id, seq,
ts)``: the idempotency key of the contract stays ``(node_id, seq)`` because a resent sample is the identical spooled
sample, ``ts`` included, and the same ``ts`` always routes to the same partition, where the key rejects it. Only a
sample reusing a stored ``seq`` with another ``ts`` (no agent sends one) would be stored beside it. SQLite databases
keep the ``(node_id, seq)`` key migration 0001 gave them (0011 leaves SQLite alone); ingest's insert names no
conflict target, so it skips a resend under either key.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    event,
    text,
)

from collector.partitions import ROLLUPS, SAMPLES, PartitionScheme, default_partition_statements
from wire.catalog import METRICS

NO_DEVICE = -1
NO_POOL = ""
ROLLUP_STATS: tuple[str, ...] = ("min", "mean", "max", "p99")
ROLLUP_BUCKET_SECONDS = 60.0

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_N_label)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _series_key() -> list[Column[object]]:
    return [
        Column("node_id", String(128), primary_key=True),
        Column("device", Integer, primary_key=True),
        Column("pool", String(128), primary_key=True),
    ]


def _metric_columns() -> list[Column[object]]:
    return [Column(m.name, Double, nullable=True) for m in METRICS]


def rollup_column(metric_name: str, stat: str) -> str:
    return f"{metric_name}_{stat}"


AGENT_SOURCE = "agent"  # nodes.source of a node whose own agent reports it

nodes = Table(
    "nodes",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("hostname", String(255), nullable=True),
    Column("agent_version", String(64), nullable=True),
    Column("first_seen", Double, nullable=False),
    # Server clock at the last batch that carried samples: liveness never depends on the node's clock.
    Column("last_seen", Double, nullable=False),
    Column("last_sample_ts", Double, nullable=True),
    Column("last_seq", BigInteger, nullable=True),
    # who reports it: "agent" (its own 500 ms samples), "remote_write" or "otlp" (a team's Prometheus, each scrape)
    Column("source", String(16), nullable=False, server_default=AGENT_SOURCE),
    # seconds between its samples when they come scraped (null for an agent): it is up for 3 of them
    Column("resolution_seconds", Double, nullable=True),
    # the remote_write token that registered it (null: an agent's); its nodes count toward its node bound
    Column("remote_token_id", String(32), nullable=True),
    Index(None, "remote_token_id"),
)

devices = Table(
    "devices",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("index", Integer, primary_key=True),
    Column("name", String(255), nullable=True),
    Column("uuid", String(128), nullable=True),
    Column("memory_total_bytes", BigInteger, nullable=True),
    Column("driver_version", String(64), nullable=True),
    Column("updated_at", Double, nullable=False),
)

samples = Table(
    "samples",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("ts", Double, primary_key=True),  # the partition column, in the key on PostgreSQL (module docstring)
    Column("device", Integer, nullable=False),
    Column("pool", String(128), nullable=False),
    *_metric_columns(),
    Column("extra", JSON, nullable=True),
    Index(None, "node_id", "ts"),
    Index(None, "pool", "ts"),
    Index(None, "ts"),
    postgresql_partition_by=f"RANGE ({SAMPLES.column})",
)

series_latest = Table(
    "series_latest",
    metadata,
    *_series_key(),
    Column("ts", Double, nullable=False),
    *_metric_columns(),
    Column("extra", JSON, nullable=True),
    # the server's clock when the row was last written: the alert evaluator reads only what changed since its last tick
    Column("updated_at", Double, nullable=True),
)

rollups_1m = Table(
    "rollups_1m",
    metadata,
    *_series_key(),
    Column("bucket", Double, primary_key=True),
    Column("samples", Integer, nullable=False),
    *[Column(rollup_column(m.name, s), Double, nullable=True) for m in METRICS for s in ROLLUP_STATS],
    Index(None, "bucket"),
    Index(None, "pool", "bucket"),
    postgresql_partition_by=f"RANGE ({ROLLUPS.column})",
)


def _with_default_partition(table: Table, scheme: PartitionScheme) -> None:
    """A table ``metadata.create_all`` makes on PostgreSQL gets its default partition, as migration 0011 gives it."""

    def after_create(_target: Table, connection: Connection, **_kw: Any) -> None:
        if connection.dialect.name == "postgresql":
            for statement in default_partition_statements(scheme):
                connection.execute(text(statement))

    event.listen(table, "after_create", after_create)


_with_default_partition(samples, SAMPLES)
_with_default_partition(rollups_1m, ROLLUPS)

# Buckets that received samples after the rollup job had passed them (a spool replayed after an outage).
rollup_backlog = Table(
    "rollup_backlog",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("bucket", Double, primary_key=True),
)

# The minutes whose rollup aggregates a server process holds and has not flushed yet (collector.minute_rollups), by
# the process (its holder name): a minute still here long after it closed was held by a process that died, and the
# rollup job rolls it again from the raw samples.
rollup_pending = Table(
    "rollup_pending",
    metadata,
    Column("holder", String(128), primary_key=True),
    Column("bucket", Double, primary_key=True),
)

job_state = Table(
    "job_state",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("watermark", Double, nullable=False),
)

# The latest control state each node reported (wire.control.NodeReport): what its replicas do and its tenants
# use, read by the fleet view (fleet.view) instead of the samples' extras.
node_reports = Table(
    "node_reports",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("ts", Double, nullable=False),  # the agent's clock when it took the report
    Column("received_at", Double, nullable=False),
    Column("report", JSON, nullable=False),
)

# Each pool's replicas on each node over time, one row per report: the replica history of the dashboard and what
# capacity learning divides a pool's rate by. Kept as long as raw samples.
replica_reports = Table(
    "replica_reports",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("pool", String(128), primary_key=True),
    Column("ts", Double, primary_key=True),
    Column("ready", Integer, nullable=False),
    Column("starting", Integer, nullable=False),
    Column("draining", Integer, nullable=False),
    Index(None, "pool", "ts"),
    Index(None, "ts"),
)
