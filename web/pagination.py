"""Id-cursor pagination for the newest-first event lists (``{"items": [...], "next": CURSOR_OR_NULL}``).

A page of ``limit`` rows answers the last row's id as ``next``; the next request passes it as ``cursor`` and gets the
rows with smaller ids. A shorter page is the last one (``next`` null).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from collector.errors import InvalidQuery

PageLimit = Annotated[int, Query(ge=1, le=1000, description="rows per page")]
Cursor = Annotated[str | None, Query(description="the `next` of the previous page")]
MAX_CURSOR_DIGITS = 18  # ids fit a 64-bit integer column; a longer "cursor" would overflow the query


def before_id(cursor: str | None) -> int | None:
    """The id a page starts below; a cursor this API did not give is a 422 naming it."""
    if cursor is None:
        return None
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > MAX_CURSOR_DIGITS:
        raise InvalidQuery("cursor", f"not a cursor this API gave: {cursor!r}")
    return int(cursor)


def next_cursor(ids: list[int], limit: int) -> str | None:
    """The cursor of the page after one holding ``ids`` (newest first), None after the last page."""
    return str(ids[-1]) if ids and len(ids) == limit else None
