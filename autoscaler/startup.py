"""How long a pool's replicas take to become ready, measured from its own scale-ups: the horizon the predictive
policy looks ahead by, in place of the configured ``startup_seconds`` once it has been seen.

Each scale-up the controller makes (the desired count rising from one tick to the next, past what is ready) opens a
wait: asked at t for N replicas. The wait closes at the first tick whose ready count reaches N, and ``now − t`` is
one measurement; a scale-down below N before then cancels it (those replicas were never waited for), and a wait
older than :data:`MAX_WAIT_SECONDS` is dropped (replicas not ready in an hour failed; they did not start slowly).
The first tick opens none: replicas already starting then were asked for before anyone watched. Pure state, fed
once a tick by the controller, which stores the estimate with the pool (``fleet.pools.Provisioning``); a new leader
carries that estimate on as one measurement (``prior``) and measures again.

The estimate is the longest of the last :data:`KEPT` measurements: a horizon too short provisions late on the slow
starts (a cold model load, an image pull), one a little long only provisions a little early. Worked: scale-ups
readied in 80, 95 and 130 s → 130 s; eight faster ones later (all 60 s) → 60 s.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

KEPT = 8  # the measurements the estimate is the longest of
MAX_WAIT_SECONDS = 3600.0


@dataclass
class StartupLearner:
    configured_seconds: float
    prior: float | None = None  # an estimate measured before (by another leader): the first measurement
    _waits: list[tuple[float, int]] = field(default_factory=list)  # (asked at, ready count waited for)
    _measured: deque[float] = field(default_factory=lambda: deque(maxlen=KEPT))
    _last_desired: int | None = None

    def __post_init__(self) -> None:
        if self.prior is not None:
            self._measured.append(self.prior)

    def observe(self, now: float, ready: int, desired: int) -> None:
        """One tick: close the waits ``ready`` has reached, cancel those ``desired`` went below or that are too old,
        and open one when ``desired`` rose since the last tick past what is ready."""
        still = []
        for asked_at, count in self._waits:
            if ready >= count:
                self._measured.append(max(now - asked_at, 0.0))
            elif desired >= count and now - asked_at <= MAX_WAIT_SECONDS:
                still.append((asked_at, count))
        self._waits = still
        if self._last_desired is not None and desired > max(self._last_desired, ready):
            self._waits.append((now, desired))
        self._last_desired = desired

    @property
    def measurements(self) -> int:
        return len(self._measured)

    @property
    def seconds(self) -> float:
        """The startup to plan with: the longest recent measurement once there is one, else the configured."""
        return max(self._measured) if self._measured else self.configured_seconds
