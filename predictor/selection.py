"""Which forecaster a pool follows (``auto``): the candidate whose recent forecasts scored best where the policy reads
them.

Each candidate's forecast is scored at the pool's decision point — ``horizon`` steps ahead, its quantile at the
pool's attainment target ``level`` — by the pinball loss, the proper score of a quantile: a bound that covered the
demand pays (1 − τ) × its excess, one that fell short pays τ × the shortfall. At τ 0.99, a bound 10 too high pays
0.1 and one 10 too low pays 9.9: a candidate is chosen for bounds that are both tight and rarely short, which is what
the policy spends replicas on. The scores of the last ``window`` origins are summed. The default (the prior, which
needs no past of the pool) stands until ``MIN_SCORED`` of them, and then until another candidate's sum is below
``1 − SWITCH_MARGIN`` of the default's: a 0.99 quantile's loss over a day rests on a dozen misses, and a small lead
is noise (on the tune half, following any lead cost replica-hours on pools the prior served well).

Pure and incremental (:class:`SkillLedger`): the bench feeds it every origin of a trace, the forecast loop every
cycle of a pool, in the same way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

MIN_SCORED = 60
SWITCH_MARGIN = 0.2


def pinball(value: float, quantile: float, level: float) -> float:
    """The quantile loss of ``quantile`` at ``level`` for the outcome ``value``: 0.99, bound 110, value 100 → 0.1;
    bound 90 → 9.9."""
    miss = value - quantile
    return level * miss if miss >= 0 else (level - 1.0) * miss


@dataclass
class SkillLedger:
    """Pending and scored forecasts of each candidate at one decision point (``horizon`` steps, ``level``)."""

    candidates: tuple[str, ...]
    level: float
    horizon: int
    window: int
    default: str
    margin: float = SWITCH_MARGIN
    _pending: deque[tuple[float, dict[str, float]]] = field(default_factory=deque)  # (target ts, bound by candidate)
    _scored: deque[dict[str, float]] = field(default_factory=deque)
    _totals: dict[str, float] = field(default_factory=dict)

    def record(self, target_ts: float, bounds: Mapping[str, float]) -> None:
        """Keep the candidates' bounds for ``target_ts`` (a candidate that could not forecast is left out and, for
        that target, nobody is compared)."""
        kept = {c: b for c, b in bounds.items() if c in self.candidates and math.isfinite(b)}
        if kept:
            self._pending.append((target_ts, kept))

    def observe(self, ts: float, value: float) -> None:
        """The demand at ``ts`` arrived: score every pending forecast of it (a missing value scores nothing) and
        forget those of earlier targets."""
        while self._pending and self._pending[0][0] <= ts + 1e-6:
            target, bounds = self._pending.popleft()
            if abs(target - ts) > 1e-6 or not math.isfinite(value) or set(bounds) != set(self.candidates):
                continue
            losses = {c: pinball(value, b, self.level) for c, b in bounds.items()}
            self._scored.append(losses)
            for c, loss in losses.items():
                self._totals[c] = self._totals.get(c, 0.0) + loss
            if len(self._scored) > self.window:
                for c, loss in self._scored.popleft().items():
                    self._totals[c] -= loss

    @property
    def scored(self) -> int:
        return len(self._scored)

    def mean_losses(self) -> dict[str, float]:
        """Each candidate's mean loss over the scored window (empty before anything was scored)."""
        n = len(self._scored)
        return {c: self._totals[c] / n for c in self.candidates} if n else {}

    def best(self) -> str:
        """The default, unless ``MIN_SCORED`` scores say another's summed loss is below (1 − margin) of its own:
        then the lowest (module docstring)."""
        if len(self._scored) < MIN_SCORED:
            return self.default
        lowest = min(self.candidates, key=lambda c: (self._totals[c], c != self.default))
        if self._totals[lowest] < (1.0 - self.margin) * self._totals[self.default]:
            return lowest
        return self.default
