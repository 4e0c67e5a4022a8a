"""Admission for ingest: a server process works on at most ``limit`` batches at once and refuses the next at the door.

Queued past what the database absorbs, batches wait until their agents time out, often after their commit: the
agent then resends a batch that was stored (a duplicate, more work) while new ones pile up — the soak benchmark saw
1,000 simulated nodes drive one process into that spiral (docs/benchmarks.md, "soak"). A 503 with ``Retry-After`` at
once costs nothing: the agent keeps the samples spooled and comes back later.
"""

from __future__ import annotations

import threading

from collector.errors import FieldError


class InFlightLimit:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise FieldError("limit", f"at least 1, not {limit}")
        self.limit = limit
        self._inside = 0
        self._lock = threading.Lock()

    def try_enter(self) -> bool:
        """Take a place if one is free; every True must be followed by one :meth:`leave`."""
        with self._lock:
            if self._inside >= self.limit:
                return False
            self._inside += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._inside = max(0, self._inside - 1)

    @property
    def inside(self) -> int:
        return self._inside
