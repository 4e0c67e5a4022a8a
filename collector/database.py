"""Engine creation for SQLite (embedded default) and PostgreSQL, and the portable upsert the hot paths use."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

from collector.errors import DatabaseCorrupt, StorageUnavailable

# WAL lets readers (queries, /metrics) run beside the writer; NORMAL skips an fsync per commit, which WAL makes safe
# against application crashes (a power loss can lose the last commits, never corrupt the file).
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=10000",
    "PRAGMA foreign_keys=ON",
    "PRAGMA temp_store=MEMORY",
    "PRAGMA cache_size=-65536",
)


def _apply_sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


def sqlite_file(url: str) -> Path | None:
    """The file of an on-disk SQLite URL; None for PostgreSQL and in-memory SQLite."""
    path = url.removeprefix("sqlite:///")
    if path == url or not path or ":memory:" in path:
        return None
    return Path(path.split("?", 1)[0])


def check_sqlite_integrity(url: str) -> None:
    """Raise ``DatabaseCorrupt`` when the SQLite file of ``url`` exists and fails ``PRAGMA quick_check``.

    Run once before migrating and serving: a damaged file otherwise fails at some later query with a traceback, and
    a supervisor that restarts the server would loop on it. quick_check reads every page (1.1 s for a 354 MB file
    on the 2-core development machine, page cache warm) but skips integrity_check's index cross-checks.
    """
    path = sqlite_file(url)
    if path is None or not path.exists() or path.stat().st_size == 0:
        return
    conn = sqlite3.connect(path)
    try:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.OperationalError:
        return  # locked or unreadable, not damaged: the engine's own open says what is wrong
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        raise DatabaseCorrupt(str(path.resolve()), str(exc)) from exc
    finally:
        conn.close()
    if problems != ["ok"]:
        raise DatabaseCorrupt(str(path.resolve()), "; ".join(problems))


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine with the settings each backend needs; creates the SQLite file's folder."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        if path and path != url and ":memory:" not in path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False}, **kwargs)
        event.listen(engine, "connect", _apply_sqlite_pragmas)
        return engine
    # As many kept connections as ingest writers run at once (16 in the benchmark): overflow connections are closed
    # on return, and reopening them per request cost PostgreSQL 88 sessions in 9 s.
    kwargs.setdefault("pool_size", 20)
    kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def insert_for(engine_or_dialect: Engine | str, table: Table) -> sqlite.Insert | postgresql.Insert:
    """The dialect's INSERT, which offers ``on_conflict_do_nothing``/``on_conflict_do_update``."""
    name = engine_or_dialect if isinstance(engine_or_dialect, str) else engine_or_dialect.dialect.name
    if name == "sqlite":
        return sqlite.insert(table)
    if name == "postgresql":
        return postgresql.insert(table)
    raise ValueError(f"unsupported database dialect {name!r}: use sqlite or postgresql")


@contextmanager
def storage_errors() -> Iterator[None]:
    """The database away, or its connection lost, raised as ``StorageUnavailable`` (answered 503 with
    ``Retry-After``); any other database error as it is."""
    try:
        yield
    except OperationalError as exc:
        raise StorageUnavailable(f"database unavailable: {exc.orig}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise StorageUnavailable(f"database connection lost: {exc.orig}") from exc
        raise
