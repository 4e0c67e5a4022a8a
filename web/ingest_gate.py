"""Admission for ingest: past what a server process absorbs, the next batch is refused at the door, at once.

Queued past what the database absorbs, batches wait until their agents time out, often after their commit: the
agent then resends a batch that was stored (a duplicate, more work) while new ones pile up — the soak benchmark saw
1,000 simulated nodes drive one process into that spiral (docs/benchmarks.md, "soak"). A 503 with ``Retry-After`` at
once costs nothing: the agent keeps the samples spooled and comes back later.

Three signs of "past capacity", each checked before the body is read or parsed (what costs):
- the oldest batch in progress came through the door ``max_queue_seconds`` ago: its body read, its parse (in the
  threadpool, behind the others' under one GIL), its wait for the writer and its commit are all in that age — a
  bound on the writer's queue alone missed the parse queue (measured on the soak: docs/benchmarks.md, "the
  collector tier");
- ``max_in_flight`` batches are already in progress;
- the event loop runs ``max_loop_lag_seconds`` late: requests are queued in the process before any handler sees
  them (the accept backlog and the loop's ready queue, where the soak's timeouts happened), and the lag is how
  long they wait there.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from wire.errors import FieldError

LOOP_PROBE_SECONDS = 0.05


class LoopLag:
    """How late this event loop runs: a probe sleeps ``LOOP_PROBE_SECONDS`` at a time; two wake-ups in a row later
    than asked are the lag (the lesser of the two: one late wake-up is a pause that is over — a collection, one slow
    call — not a queue; shedding on it refused the requests of the next 50 ms for nothing), and a probe still asleep
    past its wake-up counts as late by that much already (a loop too busy to wake the probe is exactly the one to
    shed on)."""

    def __init__(self) -> None:
        self._lag = 0.0
        self._last = 0.0  # the latest wake-up's lateness
        self._due: float | None = None
        self._task: asyncio.Task[None] | None = None

    def seconds(self) -> float:
        """The lag now, starting the probe on the running loop on first use; 0 off any loop (nothing to lag)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return 0.0
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._probe(loop))
            return 0.0
        overdue = 0.0 if self._due is None else loop.time() - self._due
        return max(self._lag, overdue)

    async def _probe(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            self._due = loop.time() + LOOP_PROBE_SECONDS
            await asyncio.sleep(LOOP_PROBE_SECONDS)
            late = max(0.0, loop.time() - self._due)
            self._lag, self._last = min(late, self._last), late


class Shed(Exception):
    """Refused at the door; the text says why (the 503's detail)."""


class IngestAdmission:
    def __init__(
        self,
        max_in_flight: int,
        *,
        max_queue_seconds: float = 1.0,
        max_loop_lag_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_in_flight < 1:
            raise FieldError("ingest_max_in_flight", f"at least 1, not {max_in_flight}")
        self.limit = max_in_flight
        self._max_queue_seconds = max_queue_seconds
        self._max_loop_lag_seconds = max_loop_lag_seconds
        self._clock = clock
        self._loop_lag = LoopLag()
        self._entered: list[float] = []  # when each batch in progress came through the door, the oldest first
        self._lock = threading.Lock()

    def enter(self) -> float:
        """Take a place and answer when (``clock``), to be given back with :meth:`leave`; raise :class:`Shed`
        saying why there is none. Called on the event loop."""
        lag = self._loop_lag.seconds()
        if lag > self._max_loop_lag_seconds:
            raise Shed(f"the server runs {lag:.1f} s behind")
        now = self._clock()
        with self._lock:
            if self._entered and (waited := now - self._entered[0]) > self._max_queue_seconds:
                raise Shed(f"the oldest batch in progress has waited {waited:.1f} s")
            if len(self._entered) >= self.limit:
                raise Shed(f"{self.limit} batches in progress")
            self._entered.append(now)
            return now

    def leave(self, entered_at: float) -> None:
        with self._lock:
            self._entered.remove(entered_at)

    @property
    def inside(self) -> int:
        return len(self._entered)
