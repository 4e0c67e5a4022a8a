"""What bounds the dashboard's live streams in one server process: how many are open per session and in all, and
the few threads their reads share (``web.dashboard.live_stream`` opens, reads and closes through it).

60 streams of one session once held every connection of the database pool and every worker thread: the API waited
30 s for a connection and the background jobs skipped their runs. Now the 61st is refused and the open ones queue for
a live-read thread, which nothing else waits for.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class TooManyStreams(Exception):
    """A stream past a cap: the message names the setting and its value."""


class LiveStreams:
    """The process's open live streams, counted per session and in all, and the threads their reads run on."""

    def __init__(self, *, per_session: int, per_process: int, reads_at_once: int) -> None:
        self.per_session = per_session
        self.per_process = per_process
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()  # TestClients of one app run on event loops of their own
        self._readers = ThreadPoolExecutor(max_workers=reads_at_once, thread_name_prefix="live-read")

    def open(self, session: str) -> None:
        """Count a stream of ``session`` in; TooManyStreams past a cap."""
        with self._lock:
            if self._open[session] >= self.per_session:
                raise TooManyStreams(
                    f"this session has {self._open[session]} live streams open, the most it may "
                    f"(dashboard_live_streams_per_session = {self.per_session}): close a live page first"
                )
            if self._open.total() >= self.per_process:
                raise TooManyStreams(
                    f"this server has {self._open.total()} live streams open, the most it serves "
                    f"(dashboard_live_streams_per_process = {self.per_process}): retry later"
                )
            self._open[session] += 1

    def close(self, session: str) -> None:
        with self._lock:
            self._open[session] -= 1
            if self._open[session] <= 0:
                del self._open[session]

    async def read(self, read: Callable[..., T], *args: Any) -> T:
        """``read(*args)`` on a live-read thread: streams queue for these, never for the API's or the jobs'."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, read, *args)
