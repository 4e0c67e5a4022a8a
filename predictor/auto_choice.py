"""``auto`` in the forecast loop: each pool's two candidates forecast every cycle, scored as the pool's demand
arrives, and the better one stored (:mod:`predictor.backends.auto`, :mod:`predictor.selection`).

A pool's ledger scores at its own decision point: its ``slo_attainment`` quantile, its ``startup_seconds`` ahead (at
least a step); a change of either starts a new ledger. Ledgers live in the leader's memory; a new leader starts
them afresh, from the prior, and the pool's stored ``selection`` says what the last one had found. Other subjects (a
GPU's memory, a KV cache) are forecast by the smoothing family: the prior learnt demand, not bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from predictor.backends.auto import CANDIDATES, SMOOTHING, follow, ledger
from predictor.base import Forecast, ForecastError, History
from predictor.selection import SkillLedger
from predictor.store import Selection

Outcome = Forecast | ForecastError


@dataclass(frozen=True)
class DecisionPoint:
    """Where a pool's forecasts are scored: the quantile ``level`` at ``horizon_steps`` ahead."""

    level: float
    horizon_steps: int


@dataclass(frozen=True)
class Choice:
    """The forecast stored for a pool, which candidate made it, and how the candidates stand."""

    outcome: Outcome
    model: str
    selection: Selection | None  # None: no choice was made (one model forecast the subject)


class AutoChooser:
    """The ledgers of every pool the loop forecasts with ``auto``."""

    def __init__(self) -> None:
        self._ledgers: dict[str, tuple[DecisionPoint, SkillLedger]] = {}
        self._seen: dict[str, float] = {}  # pool → the last step shown to its ledger

    def choose(self, pool: str, point: DecisionPoint, history: History, candidates: Mapping[str, Outcome]) -> Choice:
        """Show the pool's ledger the demand that arrived since the last cycle, record both candidates' bounds at
        its decision point, and choose (a candidate that failed is not chosen unless both did)."""
        book = self._ledger(pool, point, history.step_seconds)
        self._observe(pool, book, history)
        forecasts = {name: f for name, f in candidates.items() if isinstance(f, Forecast)}
        if not forecasts:  # neither could forecast: the prior's reason (it needs the least history)
            error = candidates.get(CANDIDATES[0])
            return Choice(error if error is not None else ForecastError("no forecast"), CANDIDATES[0], None)
        target = history.end_ts + point.horizon_steps * history.step_seconds
        chosen, forecast = follow(book, forecasts, target)
        selection = Selection(chosen, point.level, point.horizon_steps, book.scored, book.mean_losses())
        return Choice(forecast, chosen, selection)

    def forget(self, pools: set[str]) -> None:
        """Drop the ledgers of pools the loop no longer forecasts."""
        for pool in set(self._ledgers) - pools:
            self._ledgers.pop(pool, None)
            self._seen.pop(pool, None)

    def _ledger(self, pool: str, point: DecisionPoint, step_seconds: float) -> SkillLedger:
        known = self._ledgers.get(pool)
        if known is None or known[0] != point:
            known = (point, ledger(point.level, point.horizon_steps, step_seconds))
            self._ledgers[pool] = known
            self._seen.pop(pool, None)
        return known[1]

    def _observe(self, pool: str, book: SkillLedger, history: History) -> None:
        after = self._seen.get(pool)
        first = 0 if after is None else max(0, math.floor((after - history.start_ts) / history.step_seconds + 1e-9) + 1)
        for i in range(first, len(history)):
            book.observe(history.start_ts + i * history.step_seconds, float(history.values[i]))
        self._seen[pool] = history.end_ts


def decision_point(slo_attainment: float, startup_seconds: float, step_seconds: float) -> DecisionPoint:
    """The pool's decision point: 120 s startup at 60 s steps → 2 steps ahead, at least one."""
    return DecisionPoint(slo_attainment, max(1, math.ceil(startup_seconds / step_seconds - 1e-9)))


OTHER_SUBJECTS_MODEL = SMOOTHING
