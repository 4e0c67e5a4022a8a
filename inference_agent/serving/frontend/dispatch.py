"""Which replica takes a request, and who waits when every replica of a pool is full.

Each replica takes at most ``max_in_flight`` requests from the front end at once; the next one goes to the ready
replica with the least load (ties rotate). A replica's load is its requests in flight from the front end plus the
requests waiting in its own engine as last scraped (``waiting``, replica id → count; 0 when not given or not
scraped). A request of ours that waits in an engine counts twice on purpose: two replicas with 4 in flight each, one
running all 4 and one queueing 3 of them (load 4 vs 7), are not equally good. Requests from outside the front end
that wait there (a client calling the engine directly) count once. When every replica is full, requests wait in one
queue per pool ordered by priority, then arrival: a latency-critical request overtakes standard and batch ones
already waiting.
"""

from __future__ import annotations

import itertools
import threading
import time
from bisect import insort
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from inference_agent.serving.routing import Endpoint
from inference_agent.torch_runtime.api import Priority


class NoCapacity(Exception):
    """No replica can take the request: none is ready, the queue is full, or the wait ran out (answered 503)."""


# replica id → requests waiting in that replica's engine, as last scraped; called with the dispatcher's lock held,
# so it reads a stored value and never scrapes
Waiting = Callable[[str], int]


def nothing_waiting(replica_id: str) -> int:
    return 0


def least_loaded(
    endpoints: Sequence[Endpoint],
    in_flight: Mapping[str, int],
    limit: int,
    rotation: int = 0,
    waiting: Waiting = nothing_waiting,
) -> Endpoint | None:
    """The endpoint under ``limit`` requests in flight with the least load (in flight + ``waiting`` in its engine);
    among equals, the one ``rotation`` points at first (so that light traffic spreads rather than always landing on
    the first replica). ``limit`` caps the front end's own requests only: a replica whose engine queues is ranked
    lower, never closed."""
    n = len(endpoints)
    open_ = [(e, in_flight.get(e.replica_id, 0), (i - rotation) % n) for i, e in enumerate(endpoints)]
    open_ = [(e, sent, turn) for e, sent, turn in open_ if sent < limit]
    if not open_:
        return None
    return min(open_, key=lambda c: (c[1] + max(0, waiting(c[0].replica_id)), c[2]))[0]


@dataclass(order=True, frozen=True)
class _Ticket:
    priority: int
    seq: int


class Dispatcher:
    """Replica slots per pool: ``acquire`` picks the least-loaded ready replica or queues by priority."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        max_queue: int,
        clock: Callable[[], float] = time.monotonic,
        waiting: Waiting = nothing_waiting,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self._clock = clock
        self._waiting = waiting
        self._cond = threading.Condition()
        self._in_flight: dict[str, int] = {}
        self._queues: dict[str, list[_Ticket]] = {}
        self._seq = itertools.count()
        self._rotation = itertools.count()

    def in_flight(self, replica_id: str) -> int:
        return self._in_flight.get(replica_id, 0)

    def queued(self, pool: str) -> int:
        return len(self._queues.get(pool, ()))

    def acquire(
        self, pool: str, endpoints: Callable[[], Sequence[Endpoint]], priority: Priority, timeout_s: float
    ) -> Endpoint:
        """A replica slot for one request (release it with ``release``); raises NoCapacity."""
        deadline = self._clock() + timeout_s
        with self._cond:
            queue = self._queues.setdefault(pool, [])
            ticket: _Ticket | None = None
            while True:
                current = endpoints()
                if not current:
                    self._leave(queue, ticket)
                    raise NoCapacity(f"no ready replica of pool {pool}")
                if ticket is None or queue[0] == ticket:
                    pick = least_loaded(
                        current, self._in_flight, self.max_in_flight, next(self._rotation), self._waiting
                    )
                    if pick is not None and (ticket is not None or not queue):
                        self._leave(queue, ticket)
                        self._in_flight[pick.replica_id] = self._in_flight.get(pick.replica_id, 0) + 1
                        return pick
                if ticket is None:
                    if len(queue) >= self.max_queue:
                        raise NoCapacity(f"pool {pool} is overloaded: {len(queue)} requests waiting")
                    ticket = _Ticket(int(priority), next(self._seq))
                    insort(queue, ticket)
                    continue
                left = deadline - self._clock()
                if left <= 0:
                    self._leave(queue, ticket)
                    raise NoCapacity(f"pool {pool} is overloaded: no replica slot within {timeout_s:.0f} s")
                # re-check at least every 100 ms: replicas come and go without a notify
                self._cond.wait(min(left, 0.1))

    def _leave(self, queue: list[_Ticket], ticket: _Ticket | None) -> None:
        if ticket is not None:
            queue.remove(ticket)
            self._cond.notify_all()  # the next in line may go now

    def release(self, endpoint: Endpoint) -> None:
        with self._cond:
            left = self._in_flight.get(endpoint.replica_id, 0) - 1
            if left > 0:
                self._in_flight[endpoint.replica_id] = left
            else:
                self._in_flight.pop(endpoint.replica_id, None)
            self._cond.notify_all()
