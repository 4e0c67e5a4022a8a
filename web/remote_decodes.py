"""A bound on the remote-write and OTLP bodies decoded at once: each holds its decoded series until they are stored.

A body within the wire bounds (``collector.remote.wire_counts``) still decodes to up to ~100 MB of series; four
960,000-series bodies at once answered 500 MemoryError under a 4 GiB limit. Past ``size`` decodes in progress a
sender is answered 503 with Retry-After, which Prometheus and the OpenTelemetry Collector both retry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class NoDecodeSlot(Exception):
    """Every slot is taken; the message names the bound and its setting."""


class DecodeSlots:
    def __init__(self, size: int) -> None:
        self.size = size
        self._free = threading.BoundedSemaphore(size)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the block, or raise ``NoDecodeSlot`` at once (never wait: the sender retries)."""
        if not self._free.acquire(blocking=False):
            raise NoDecodeSlot(f"{self.size} bodies already being decoded (remote_write_max_concurrent_decodes)")
        try:
            yield
        finally:
            self._free.release()
