"""SIGTERM/SIGINT set the stop event from a watcher thread: a main thread hammering ``Event.wait`` (re-taking its
lock thousands of times a second, where a handler calling ``set()`` could deadlock on it) always stops."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

SCRIPT = """
import sys, threading
from inference_agent.stop_signals import stop_on_signals
stop = threading.Event()
stop_on_signals(stop, first=lambda: print("first", flush=True))
print("ready", flush=True)
while not stop.wait(0.0001):
    pass
print("stopped", flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sets_the_stop_event_however_busy_the_main_thread_waits(sig: signal.Signals) -> None:
    for _ in range(5):
        child = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        child.send_signal(sig)
        out, _ = child.communicate(timeout=10)
        assert (child.returncode, out) == (0, "first\nstopped\n")
