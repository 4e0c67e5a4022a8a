"""``auto``: the prior or the smoothing family, whichever has lately scored better for this series where the policy
reads the forecast (:mod:`predictor.selection`).

The prior (:mod:`predictor.backends.prior`) knows how demand moves across many pools and needs no past of its own;
the smoothing family (:mod:`predictor.backends.smoothing`) learns this series' own level, drift, daily shape and
band. ``auto`` forecasts with both at every origin and scores both once the demand ``decision_steps`` ahead arrives;
it follows the prior unless the smoothing family's quantile at ``level`` (the attainment target's) has clearly had
the lower pinball loss over the last day of origins (:func:`follow`). Its ``name`` says which it followed:
"auto[prior]", "auto[smoothing[ses0.3]]".

Fed origin after origin (``update``, as the backtest and the forecast loop do), it carries its scores along; a fit on a
history that does not extend the last one starts them afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from predictor.backends.prior import PriorForecaster
from predictor.backends.smoothing import Smoothing
from predictor.base import Forecast, Forecaster, ForecastError, History
from predictor.distribution import quantile
from predictor.selection import SkillLedger

PRIOR = "prior"
SMOOTHING = "smoothing"
CANDIDATES = (PRIOR, SMOOTHING)
DEFAULT_LEVEL = 0.99
DAY_S = 86_400.0


def ledger(level: float, decision_steps: int, step_seconds: float) -> SkillLedger:
    """A ledger of the two candidates at one decision point, over the last day of origins (at least 60)."""
    window = max(60, round(DAY_S / step_seconds))
    return SkillLedger(CANDIDATES, level, max(decision_steps, 1), window, PRIOR)


class Auto:
    """The candidate with the better recent pinball loss at (``decision_steps`` ahead, ``level``)."""

    def __init__(self, level: float = DEFAULT_LEVEL, decision_steps: int = 1) -> None:
        self.level = level
        self.decision_steps = decision_steps
        self.name = "auto"
        self._history: History | None = None
        self._ledger: SkillLedger | None = None
        self._seen = 0  # steps of the history already shown to the ledger

    def fit(self, history: History) -> Self:
        self._ledger = ledger(self.level, self.decision_steps, history.step_seconds)
        self._seen = 0
        self._history = None
        return self.update(history)

    def update(self, history: History) -> Self:
        """Carry the scores on to ``history`` when it extends the last one (else start afresh, as ``fit``)."""
        if self._ledger is None or (self._history is not None and not history.extends(self._history)):
            return self.fit(history)
        for i in range(self._seen, len(history)):
            self._ledger.observe(history.start_ts + i * history.step_seconds, float(history.values[i]))
        self._seen = len(history)
        self._history = history
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._history is None or self._ledger is None:
            raise ForecastError("auto: predict called before fit")
        forecasts: dict[str, Forecast] = {}
        problems: list[str] = []
        candidates: dict[str, Forecaster] = {PRIOR: PriorForecaster(), SMOOTHING: Smoothing()}
        for name, forecaster in candidates.items():
            try:
                forecasts[name] = forecaster.fit(self._history).predict(max(horizon, self.decision_steps))
            except ForecastError as exc:
                problems.append(f"{name}: {exc}")
        if not forecasts:
            raise ForecastError("auto: " + "; ".join(problems))
        target_ts = self._history.end_ts + self.decision_steps * self._history.step_seconds
        chosen, forecast = follow(self._ledger, forecasts, target_ts)
        self.name = f"auto[{candidates[chosen].name}]"
        return _first(forecast, horizon)


def follow(book: SkillLedger, forecasts: Mapping[str, Forecast], target_ts: float) -> tuple[str, Forecast]:
    """Record each candidate's quantile at the ledger's decision point for ``target_ts``, then the candidate to
    follow (the ledger's best, else the first that forecast) and its forecast."""
    step = book.horizon - 1
    book.record(target_ts, {n: float(quantile(f, book.level)[min(step, f.horizon - 1)]) for n, f in forecasts.items()})
    chosen = book.best()
    if chosen not in forecasts:
        chosen = next(iter(forecasts))
    return chosen, forecasts[chosen]


def _first(forecast: Forecast, horizon: int) -> Forecast:
    """The first ``horizon`` steps of a forecast made for more."""
    quantiles = None if forecast.quantiles is None else forecast.quantiles[:horizon]
    return Forecast(forecast.yhat[:horizon], forecast.lo[:horizon], forecast.hi[:horizon], forecast.levels, quantiles)
