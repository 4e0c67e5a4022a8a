"""A one-line progress bar on stderr for the long-running CLI commands (``backtest``, ``replay``)."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """A one-line bar on stderr, shown once a run has taken 1 s; redrawn at most every 0.2 s (5 s off a
    terminal, so a log gets a line every 5 s, not a line per item). ``unit`` names what is counted."""

    def __init__(self, label: str, width: int = 30, *, unit: str = "origins") -> None:
        self.label, self.width, self.unit = label, width, unit
        self.interactive = sys.stderr.isatty()
        self.every_s = 0.2 if self.interactive else 5.0
        self.started = self.drawn = time.perf_counter()
        self.shown = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.shown and self.interactive:
            print(file=sys.stderr, flush=True)

    def update(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.started < 1.0 or (now - self.drawn < self.every_s and done < total):
            return
        self.drawn, self.shown = now, True
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = now - self.started
        eta = elapsed * (total - done) / max(done, 1)  # 100 of 1,700 origins in 10 s → 160 s to go
        line = f"{self.label} [{bar}] {done}/{total} {self.unit}, {elapsed:.0f} s, about {eta:.0f} s to go"
        print(
            ("\r" if self.interactive else "") + line, end="" if self.interactive else "\n", file=sys.stderr, flush=True
        )
