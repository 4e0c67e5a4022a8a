"""The request bodies the serving front end reads and decodes at once, bounded in bytes for all requests together.

Each body may be up to the cap (16 MiB); 256 connections each sending one would hold 4 GiB before a single one is
refused. A body is read only once its announced length fits in what is left of ``max_bytes`` (64 MiB by default:
four of the largest classify requests), and given back once it is decoded and checked — an admitted request then
holds only its own body, bounded by its tenant's concurrency. Past the budget a request is answered 503 unread.
"""

from __future__ import annotations

import threading


class BodyBudget:
    """Bytes of bodies being read and decoded now, at most ``max_bytes`` together."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._used = 0
        self._lock = threading.Lock()

    def lease(self, length: int) -> BodyLease | None:
        """A lease on ``length`` bytes, or None when they do not fit now."""
        with self._lock:
            if self._used + length > self.max_bytes:
                return None
            self._used += length
        return BodyLease(self, length)

    @property
    def used(self) -> int:
        return self._used

    def _give_back(self, length: int) -> None:
        with self._lock:
            self._used -= length


class BodyLease:
    """What one body holds of the budget; ``release`` gives it back, once, however often it is called."""

    def __init__(self, budget: BodyBudget, length: int) -> None:
        self._budget: BodyBudget | None = budget
        self.length = length

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget._give_back(self.length)
