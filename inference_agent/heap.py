"""The startup heap of a long-running agent process, set aside from the garbage collector once it is built.

CPython's full collection walks every tracked object, and a process that has imported torch and built its model
holds about 173,000 of them: one full collection took 72–83 ms in a classify replica on this 2-core machine (quiet)
and up to 276 ms beside other work, every request in flight stalled behind it. Such a collection comes a few times a
minute under load, so a few requests in a thousand waited for one: the fast tenant's p99 in ``bench.isolation``
(59–105 ms against a p50 of 13 ms). Frozen (``gc.freeze``), the startup objects are never walked again: the same
full collection takes 0.01 ms. They are the modules, the model and the servers, which live as long as the process.
"""

from __future__ import annotations

import gc
from typing import Any


def settle_heap() -> int:
    """Collect what startup left behind, then freeze what survives (it lives as long as the process); answers the
    objects frozen in all. Call it once the process is built and warm, before it takes requests."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def heap_stats() -> dict[str, Any]:
    """What an operator needs to tell whether full collections stall the process: objects frozen at startup, and
    collections so far per generation."""
    return {
        "frozen_objects": gc.get_freeze_count(),
        "collections": [generation["collections"] for generation in gc.get_stats()],
    }
