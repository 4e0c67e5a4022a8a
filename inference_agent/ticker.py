"""A fixed-rate tick that does not drift: deadlines are ``start + k × period`` on a monotonic clock.

Sleeping ``period`` after each tick would add the tick's own work to every period (500 ms + 3 ms of probes → one
tick lost every ~83 s). Scheduling against absolute deadlines keeps tick k at ``start + k × period`` however long
the work takes; a tick that overruns whole periods skips them (counted) instead of bunching up.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Tick:
    index: int
    deadline: float
    lateness_s: float  # how long after its deadline the tick actually started
    skipped: int  # ticks passed over because the previous one overran


def next_tick(start: float, period_s: float, last_index: int, now: float) -> tuple[int, float, int]:
    """The next tick after ``last_index`` that is not already a whole period late: (index, deadline, skipped)."""
    index = last_index + 1
    deadline = start + index * period_s
    if now - deadline >= period_s:
        # 1.3 periods late for tick 5 → ticks 5 is skipped and tick 6 (0.3 period late) runs
        behind = math.floor((now - deadline) / period_s)
        return index + behind, deadline + behind * period_s, behind
    return index, deadline, 0


class Ticker:
    """Yields ticks at a fixed rate; ``stop`` (an Event) ends the wait early."""

    def __init__(
        self,
        period_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self._period_s = period_s
        self._clock = clock
        self._stop = stop or threading.Event()
        self._wait = wait or self._stop.wait
        self._start = clock()
        self._index = -1

    def next(self) -> Tick | None:
        """Block until the next deadline and return its tick; None once stopped."""
        index, deadline, skipped = next_tick(self._start, self._period_s, self._index, self._clock())
        delay = deadline - self._clock()
        if delay > 0 and self._wait(delay):
            return None
        if self._stop.is_set():
            return None
        self._index = index
        return Tick(index, deadline, max(0.0, self._clock() - deadline), skipped)
