"""A settable clock for code that takes ``now`` or a ``clock`` callable."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    now: float = 1_764_424_800.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
