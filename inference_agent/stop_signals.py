"""Stopping on SIGTERM/SIGINT without a deadlock: the signal sets a ``threading.Event`` from a thread of its own.

A Python signal handler runs on the main thread between two bytecodes, possibly while that thread holds the very
lock ``Event.set()`` needs — e.g. while ``Event.wait(1.0)`` re-takes its condition's lock after a timeout, which the
main thread of a daemon does every second — and then waits on itself forever (``fleetpilot demo`` hung so on Ctrl-C).
Here the C-level handler only writes the signal's number to a pipe (``signal.set_wakeup_fd``, async-signal-safe), the
Python-level handler does nothing, and a watcher thread reads the pipe and sets the event in ordinary code.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(
    stop: threading.Event,
    signals: Iterable[signal.Signals] = STOP_SIGNALS,
    first: Callable[[], None] = lambda: None,
) -> None:
    """From now on each of ``signals`` calls ``first`` then sets ``stop`` (logged once per signal), both on the
    watcher thread. Call it from the main thread."""
    wanted = {int(s) for s in signals}
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for sig in wanted:
        signal.signal(sig, _noted_by_the_wakeup_fd)

    def watch() -> None:
        while True:
            for signum in os.read(read_end, 64):
                if signum in wanted:
                    log.info("received %s: stopping", signal.Signals(signum).name)
                    first()
                    stop.set()

    threading.Thread(target=watch, name="stop-signals", daemon=True).start()


def _noted_by_the_wakeup_fd(_signum: int, _frame: object) -> None:
    """The signal's number is already in the wakeup pipe; nothing may be done here (see the module docstring)."""
