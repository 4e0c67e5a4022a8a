"""The benchmarks' databases: a migrated, empty one for each run, an SQLite file or a PostgreSQL database of its own
on the server ``FLEETPILOT_BENCH_POSTGRES_URL`` names (dropped afterwards)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from migrations import runner

POSTGRES_ADMIN_URL = os.environ.get(
    "FLEETPILOT_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """A migrated, empty database: an SQLite file in ``folder``, or a new PostgreSQL database dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite:///{folder}/bench.db"
        runner.upgrade(url)
        yield url
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"fleetpilot_bench_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        runner.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
