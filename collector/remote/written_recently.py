"""Rows this process wrote lately, so an upsert that would write the same values again is left out: a GPU's name,
UUID and memory size come with every scrape (800 GPUs × 8 scrapes were 6,400 upserts that changed nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class WrittenRecently:
    """By ``key`` (its columns), the row last written and when; bounded (forgotten whole past ``max_rows``)."""

    def __init__(self, key: tuple[str, ...], *, refresh_seconds: float, max_rows: int = 100_000) -> None:
        self._key = key
        self._refresh_seconds = refresh_seconds
        self._max_rows = max_rows
        self._written: dict[tuple[Any, ...], tuple[dict[str, Any], float]] = {}

    def changed(self, rows: Sequence[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The ``rows`` not written with these values within ``refresh_seconds`` before ``now``, noted as written."""
        if len(self._written) > self._max_rows:
            self._written.clear()
        out = []
        for row in rows:
            key = tuple(row[c] for c in self._key)
            last = self._written.get(key)
            if last is None or last[0] != row or now - last[1] >= self._refresh_seconds:
                self._written[key] = (row, now)
                out.append(row)
        return out

    def clear(self) -> None:
        self._written.clear()
