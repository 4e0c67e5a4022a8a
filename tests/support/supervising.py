"""Driving a replica supervisor by hand in tests: pass after pass until what the test waits for holds."""

from __future__ import annotations

import time
from collections.abc import Callable

from inference_agent.serving.supervision.supervisor import Supervisor


def step_until(supervisor: Supervisor, condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: {supervisor.routes()}"
        supervisor.step()
        time.sleep(0.05)
