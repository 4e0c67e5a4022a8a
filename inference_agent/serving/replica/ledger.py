"""A replica's own request counts: arrivals, outcomes, in-flight, and end-to-end latencies of the trailing window.

Counters are cumulative since the replica started (the builtin probe takes deltas); latencies are kept for the
trailing ``window_s`` (10 s, the catalog's p99 window) and handed out raw so that the probe can take one p99 over
every replica of a pool rather than average their p99s.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from wire.percentile import percentile_or_none

LATENCY_WINDOW_S = 10.0
MAX_WINDOW_SAMPLES = 20_000  # 2,000 requests/s for 10 s; older samples beyond that are dropped first


class RequestLedger:
    def __init__(self, *, window_s: float = LATENCY_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._zero = threading.Condition(self._lock)
        self.arrived = 0
        self.completed = 0
        self.failed = 0
        self.rejected = 0
        self.in_flight = 0
        self._latencies: deque[tuple[float, float]] = deque(maxlen=MAX_WINDOW_SAMPLES)  # (finished at, seconds)

    def arrive(self) -> None:
        with self._lock:
            self.arrived += 1
            self.in_flight += 1

    def reject(self) -> None:
        """A request refused before it started (draining, warming): it never becomes in-flight."""
        with self._lock:
            self.rejected += 1

    def finish(self, latency_s: float, *, ok: bool) -> None:
        with self._lock:
            self.in_flight -= 1
            if ok:
                self.completed += 1
                self._latencies.append((self._clock(), latency_s))
            else:
                self.failed += 1
            if self.in_flight == 0:
                self._zero.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until nothing is in flight (True) or ``timeout_s`` passes (False)."""
        with self._lock:
            return self._zero.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)

    def window(self) -> list[float]:
        """Latencies of requests finished within the trailing window, oldest first."""
        with self._lock:
            horizon = self._clock() - self.window_s
            while self._latencies and self._latencies[0][0] < horizon:
                self._latencies.popleft()
            return [seconds for _, seconds in self._latencies]

    def snapshot(self) -> dict[str, Any]:
        window = self.window()
        with self._lock:
            return {
                "requests": {
                    "arrived": self.arrived,
                    "completed": self.completed,
                    "failed": self.failed,
                    "rejected": self.rejected,
                    "in_flight": self.in_flight,
                },
                "latency": {
                    "window_s": self.window_s,
                    "samples_seconds": [round(s, 6) for s in window],
                    "p99_seconds": percentile_or_none(window, 99.0),
                },
            }
