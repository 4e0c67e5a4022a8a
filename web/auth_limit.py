"""Failed authentication, counted per client address (API bearer tokens and dashboard logins alike): past
``max_failures`` within ``window_seconds`` the address's next failures wait until its oldest failure leaves the
window. Only failures are counted and only failures wait: a success neither clears the count (a guesser sharing an
address with a real user would be reset at each of the user's logins) nor is ever held back. Pure given ``now``;
one instance per server process."""

from __future__ import annotations

import threading
from collections import deque


class FailedLogins:
    def __init__(self, *, max_failures: int = 5, window_seconds: float = 60.0, max_addresses: int = 10_000) -> None:
        self.max_addresses = max_addresses
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after_seconds(self, address: str, *, now: float) -> float:
        """0 when ``address`` may try now; else how long until it may (5 failures at t=0..4, window 60 → 56 s at 4)."""
        with self._lock:
            recent = self._recent(address, now)
            if len(recent) < self.max_failures:
                return 0.0
            return recent[0] + self.window_seconds - now

    def record_failure(self, address: str, *, now: float) -> None:
        with self._lock:
            if len(self._failures) >= self.max_addresses and address not in self._failures:
                self._forget_quiet(now)
            self._recent(address, now).append(now)

    def _recent(self, address: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(address, deque())
        while failures and failures[0] <= now - self.window_seconds:
            failures.popleft()
        return failures

    def _forget_quiet(self, now: float) -> None:
        """Bound memory under a flood of addresses: drop those with nothing in the window, else the oldest half."""
        quiet = [a for a, f in self._failures.items() if not f or f[-1] <= now - self.window_seconds]
        for address in quiet or list(self._failures)[: len(self._failures) // 2]:
            del self._failures[address]
