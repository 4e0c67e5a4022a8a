"""Staged points into ``remote_points`` in bulk: the keys a request's groups already hold read first, the rest
inserted with one executemany of tuples through the driver (no SQLAlchemy compile or dict per point).

Each point is stored under its own ``(series_id, ts)`` key: a resend or a WAL replay finds its keys held (an equal
value a duplicate, another a conflict), so it stores nothing twice. The read is exact where the receiver holds its
groups (PostgreSQL's advisory lock per group, SQLite's single writer); ``ON CONFLICT DO NOTHING`` covers the rest.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import Connection, select

from collector.remote.tables import remote_points

Key = tuple[int, float]  # (series id, ts)


class PointInserter:
    def __init__(self, dialect: str) -> None:
        mark = "?" if dialect == "sqlite" else "%s"
        self._insert = (
            f"INSERT INTO {remote_points.name} (series_id, ts, group_id, value)"
            f" VALUES ({mark}, {mark}, {mark}, {mark}) ON CONFLICT DO NOTHING"
        )

    def insert(self, conn: Connection, points: dict[Key, tuple[int, float]]) -> tuple[list[Key], dict[Key, float]]:
        """Insert ``points`` (value and group by key) not already stored; answer the new keys and the held ones'
        stored values."""
        held = self._held(conn, points)
        new = [key for key in points if key not in held]
        if new:
            rows = [(sid, ts, *points[(sid, ts)]) for sid, ts in new]
            conn.exec_driver_sql(self._insert, rows)
        return new, held

    def _held(self, conn: Connection, points: dict[Key, tuple[int, float]]) -> dict[Key, float]:
        """The stored values of ``points``' keys, read by their groups' scrape times (the (group_id, ts) index)."""
        p = remote_points.c
        groups = sorted({group for group, _ in points.values()})
        lo, hi = min(ts for _, ts in points), max(ts for _, ts in points)
        held: dict[Key, float] = {}
        for chunk in chunks(groups):
            query = select(p.series_id, p.ts, p.value).where(p.group_id.in_(chunk), p.ts.between(lo, hi))
            held.update({(sid, ts): value for sid, ts, value in conn.execute(query) if (sid, ts) in points})
        return held


def chunks(items: list[int], size: int = 2000) -> Iterator[list[int]]:
    """``items`` in lists of ``size``: a statement's bound parameters stay under SQLite's limit (32,766)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
