"""Waiting in tests for what another thread or process makes true."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(condition: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """``condition()``'s first truthy answer, polled every 50 ms; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError("timed out waiting")
