"""Time partitions of ``samples`` (by ``ts``, one an hour) and ``rollups_1m`` (by ``bucket``, one a day) on PostgreSQL.

Why partitions: retention then drops a whole hour of samples (detach, drop: a catalog change) instead of deleting
its rows one by one, which writes a dead tuple and WAL per row and leaves autovacuum the rest; and a ``/series``
range reads only the partitions it overlaps. SQLite keeps plain tables, and :class:`PartitionJob` does nothing there.

The sizes follow retention's granularity: retention drops only partitions that lie wholly before its cutoff, so a
row lives past its retention by at most one period — an hour over the 24 h of raw samples, a day over the 30 days of
rollups — and keeps about 25 + ahead hourly tables of samples and 31 + ahead daily ones of rollups.

Partitions live in their own schema (``partitions``) so that ``public`` keeps one table per concept, as the metadata
declares it (Alembic's comparison looks at ``public`` only). Each table also has a DEFAULT partition: a sample whose
time no partition covers (a spool replayed from days ago, a clock far off) lands there instead of failing ingest.
PostgreSQL refuses a new partition while the default holds rows of its range, so :class:`PartitionJob` creates each
partition ``ahead_periods`` before its time comes, and should the default hold some rows of a new range all the same
(every server was down for longer than that), :func:`create_partition` moves them into it in the same transaction.
A new partition is created apart and then ATTACHed, which locks the parent only against other schema changes (SHARE
UPDATE EXCLUSIVE), never against ingest or reads.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)

PARTITION_SCHEMA = "partitions"
PARTITION_INTERVAL_SECONDS = 600.0  # how often the job runs: six chances within the next hour's lead time
LOCK_TIMEOUT = "2s"  # a schema change that waits longer for its lock gives up until its job's next run
_BOUND = re.compile(r"FROM \('?([-+0-9.eE]+)'?\) TO \('?([-+0-9.eE]+)'?\)")


@dataclass(frozen=True)
class PartitionScheme:
    """How one table is cut: by ``column`` into periods of ``period_seconds`` (Unix seconds, UTC), kept
    ``ahead_periods`` ahead of now; each partition named after its period's start (``samples_p2025112914``)."""

    table: str
    column: str
    period_seconds: float
    ahead_periods: int
    backfill_periods: int  # how far back the migration cuts existing rows; older ones go to the default partition
    name_format: str

    def period_start(self, ts: float) -> float:
        """The start of the period holding ``ts``: 1 764 426 000.5 → 1 764 424 800.0 for hours."""
        return math.floor(ts / self.period_seconds) * self.period_seconds

    def name(self, start: float) -> str:
        return f"{self.table}_p{datetime.fromtimestamp(start, UTC).strftime(self.name_format)}"

    @property
    def default_name(self) -> str:
        return f"{self.table}_default"

    def starts_ahead(self, now: float) -> list[float]:
        """The period holding ``now`` and the ``ahead_periods`` after it."""
        first = self.period_start(now)
        return [first + k * self.period_seconds for k in range(self.ahead_periods + 1)]


SAMPLES = PartitionScheme("samples", "ts", 3600.0, ahead_periods=6, backfill_periods=8 * 24, name_format="%Y%m%d%H")
ROLLUPS = PartitionScheme("rollups_1m", "bucket", 86400.0, ahead_periods=2, backfill_periods=62, name_format="%Y%m%d")
SCHEMES: tuple[PartitionScheme, ...] = (SAMPLES, ROLLUPS)


@dataclass(frozen=True)
class Partition:
    """One attached partition; the default one has no bounds."""

    name: str
    lower: float | None
    upper: float | None

    @property
    def is_default(self) -> bool:
        return self.lower is None


def wholly_before(partitions: list[Partition], cutoff: float) -> list[Partition]:
    """The bounded partitions whose every row is older than ``cutoff``, oldest first: with hours [0, 3600) and
    [3600, 7200), cutoff 5400 → only the first (the second straddles the cutoff and stays whole)."""
    old = [p for p in partitions if p.upper is not None and p.upper <= cutoff]
    return sorted(old, key=lambda p: p.upper or 0.0)


def is_partitioned(conn: Connection, table: str) -> bool:
    """Whether ``table`` is a partitioned table here (False on SQLite and on PostgreSQL before migration 0011)."""
    if conn.dialect.name != "postgresql":
        return False
    found = conn.scalar(
        text("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(:table)"), {"table": f"public.{table}"}
    )
    return found is not None


def partitions_of(conn: Connection, scheme: PartitionScheme) -> list[Partition]:
    """The partitions attached to the scheme's table, as the catalog has them."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:table)"
        ),
        {"table": f"public.{scheme.table}"},
    )
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound)
        lower, upper = (float(match.group(1)), float(match.group(2))) if match else (None, None)
        found.append(Partition(name, lower, upper))
    return found


def lock_timed_out(exc: OperationalError) -> bool:
    """Whether a statement gave up waiting for its lock (``lock_timeout``, SQLSTATE 55P03), not a database away."""
    return getattr(exc.orig, "sqlstate", None) == "55P03"


def default_partition_statements(scheme: PartitionScheme) -> list[str]:
    """The schema and the table's DEFAULT partition, if missing: what the migration runs, and what
    ``metadata.create_all`` runs after creating the table on PostgreSQL, so a table made either way takes rows."""
    return [
        f"CREATE SCHEMA IF NOT EXISTS {PARTITION_SCHEMA}",
        f"CREATE TABLE IF NOT EXISTS {PARTITION_SCHEMA}.{scheme.default_name}"
        f" PARTITION OF public.{scheme.table} DEFAULT",
    ]


def create_partition(conn: Connection, scheme: PartitionScheme, start: float) -> bool:
    """Attach the partition of the period starting at ``start`` unless it exists; True when it was created.

    Rows of that period already in the default partition move into it first, in the caller's transaction, so the
    attach never fails on them and no row is lost or doubled.
    """
    name = scheme.name(start)
    if conn.scalar(text("SELECT to_regclass(:name)"), {"name": f"{PARTITION_SCHEMA}.{name}"}) is not None:
        return False
    upper = start + scheme.period_seconds
    qualified, default = f"{PARTITION_SCHEMA}.{name}", f"{PARTITION_SCHEMA}.{scheme.default_name}"
    conn.execute(text(f"CREATE TABLE {qualified} (LIKE public.{scheme.table} INCLUDING DEFAULTS)"))
    in_range = f"{scheme.column} >= {start!r} AND {scheme.column} < {upper!r}"
    moved = conn.execute(
        text(
            f"WITH moved AS (DELETE FROM {default} WHERE {in_range} RETURNING *)"
            f" INSERT INTO {qualified} SELECT * FROM moved"
        )
    ).rowcount
    conn.execute(
        text(
            f"ALTER TABLE public.{scheme.table} ATTACH PARTITION {qualified} FOR VALUES FROM ({start!r}) TO ({upper!r})"
        )
    )
    if moved:
        log.info("partitions: moved %d rows of %s from the default partition into it", moved, name)
    return True


@dataclass(frozen=True)
class PartitionReport:
    """The partitions one run created (none when all existed, and always none on SQLite)."""

    created: tuple[str, ...]


class PartitionJob:
    """Creates the partitions of the coming periods; the scheduler calls ``run(now)`` every
    ``PARTITION_INTERVAL_SECONDS``, on one server at a time. Idempotent: a second run creates nothing."""

    def __init__(self, engine: Engine, schemes: tuple[PartitionScheme, ...] = SCHEMES) -> None:
        self._engine = engine
        self._schemes = schemes

    def run(self, now: float) -> PartitionReport:
        if self._engine.dialect.name != "postgresql":
            return PartitionReport(())
        created: list[str] = []
        for scheme in self._schemes:
            with self._engine.connect() as conn:
                if not is_partitioned(conn, scheme.table):
                    continue
            for start in scheme.starts_ahead(now):
                try:
                    with self._engine.begin() as conn:  # one partition a transaction: its locks are held briefly
                        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                        if create_partition(conn, scheme, start):
                            created.append(scheme.name(start))
                except OperationalError as exc:
                    if not lock_timed_out(exc):
                        raise
                    log.warning("partitions: %s is busy; the next run creates %s", scheme.table, scheme.name(start))
                    break
        if created:
            log.info("partitions: created %s", ", ".join(created))
        return PartitionReport(tuple(created))
