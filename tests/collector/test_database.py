"""The SQLite integrity check run before migrating: a damaged file is named with what to do, a sound one passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.database import check_sqlite_integrity, make_engine, sqlite_file
from collector.errors import DatabaseCorrupt
from migrations import runner
from migrations.schema import target_metadata

PAGE_BYTES = 4096


def sound_database(path: Path) -> str:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    target_metadata.create_all(engine)
    engine.dispose()
    return url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///./.fleetpilot/fleetpilot.db", Path(".fleetpilot/fleetpilot.db")),
        ("sqlite:////var/lib/fp.db?timeout=5", Path("/var/lib/fp.db")),
        ("sqlite:///:memory:", None),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_the_file_of_a_url(url: str, expected: Path | None) -> None:
    assert sqlite_file(url) == expected


def test_a_sound_missing_or_non_sqlite_database_passes(tmp_path: Path) -> None:
    check_sqlite_integrity(sound_database(tmp_path / "ok.db"))
    check_sqlite_integrity(f"sqlite:///{tmp_path}/not-yet-created.db")
    check_sqlite_integrity("postgresql+psycopg://postgres@127.0.0.1:1/none")  # not ours to check: no connection


def test_a_file_that_is_not_a_database_is_named_with_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "fleetpilot.db"
    path.write_bytes(b"this is no database\n" * 500)
    with pytest.raises(DatabaseCorrupt) as caught:
        check_sqlite_integrity(f"sqlite:///{path}")
    message = str(caught.value)
    assert str(path) in message and "file is not a database" in message
    assert "move it aside" in message and "restore the latest backup" in message


def test_damaged_pages_are_found_before_any_migration_runs(tmp_path: Path) -> None:
    path = tmp_path / "fleetpilot.db"
    url = sound_database(path)
    with path.open("r+b") as f:
        f.seek(PAGE_BYTES * 2)  # a table's b-tree page, past the schema
        f.write(b"\xff\x00" * PAGE_BYTES)
    with pytest.raises(DatabaseCorrupt, match=r"malformed|corrupt"):
        runner.upgrade(url)
    assert path.read_bytes()[PAGE_BYTES * 2 : PAGE_BYTES * 2 + 4] == b"\xff\x00\xff\x00"  # left as found
