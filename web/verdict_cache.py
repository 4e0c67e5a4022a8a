"""A bounded, thread-safe cache of authentication verdicts, each until its own expiry, least recently used evicted
first: at the bound one entry goes, never the whole cache (a flood of new keys then costs only the coldest
verdicts, where clearing it made every known agent reverify at once)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class VerdictCache(Generic[V]):
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[V, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, *, now: float) -> V | None:
        """The verdict of ``key`` while it has not expired (it becomes the most recently used); else None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[1] <= now:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: str, verdict: V, *, until: float) -> None:
        """Keep ``verdict`` until ``until``; past ``max_entries`` the least recently used entry is dropped."""
        with self._lock:
            self._entries[key] = (verdict, until)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
