"""Split-conformal calibration of any forecaster's 90 % interval on its own recent rolling-origin residuals.

At a handful of origins on the history's tail (only data before each origin), the wrapped model forecasts h steps;
each outcome is scored against the model's own half-width at that step: upper score (y − yhat) / (hi − yhat),
lower score (yhat − y) / (yhat − lo). The 95 % conformal quantile of each side rescales the half-widths, step by
step: an interval that covered 60 % with upper scores' quantile 1.8 gets an upper half-width 1.8 × its own. Scores
are pooled over steps (12 origins × 15 steps = 180 scores per side) because 12 per step are too few for a 5 % tail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Self

import numpy as np

from predictor.backends.ensemble import tail_origins
from predictor.backends.gaps import require_observed
from predictor.backends.intervals import UPPER_Q, ordered_forecast
from predictor.base import FloatArray, Forecast, Forecaster, ForecastError, History

MIN_SCORES = 10
WIDTH_FLOOR = 0.01  # half-widths below 1 % of the mean step change are floored: a zero-width band still scales


def conformal_quantile(scores: FloatArray, level: float = UPPER_Q) -> float:
    """The ceil((m + 1) × level)-th smallest of m scores (the max when m < 19 at level 0.95)."""
    ordered = np.sort(scores)
    rank = min(math.ceil((len(ordered) + 1) * level), len(ordered))
    return float(ordered[rank - 1])


class Calibrated:
    """Wraps a forecaster factory; ``calibrated`` says whether the last ``predict`` had enough scores to rescale.

    Cost: ``origins`` + 1 fits per ``predict`` (12 by default + 1), so keep ``origins`` small inside a backtest.
    """

    def __init__(self, forecaster_factory: Callable[[], Forecaster], origins: int = 12) -> None:
        self.factory = forecaster_factory
        self.origins = origins
        self.name = "calibrated"
        self.calibrated = False
        self.scale_lo = 1.0
        self.scale_hi = 1.0
        self._history: History | None = None
        self._model: Forecaster | None = None
        self._cache: dict[int, Forecast] = {}

    def fit(self, history: History) -> Self:
        require_observed(history, 2, "calibrated")
        self._model = self.factory().fit(history)
        self.name = f"{self._model.name}+conformal"
        self._history = history
        self._cache = {}
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._history is None or self._model is None:
            raise ForecastError("calibrated: predict called before fit")
        if horizon not in self._cache:
            self._cache[horizon] = self._calibrate(self._model.predict(horizon), self._history, horizon)
        return self._cache[horizon]

    def _calibrate(self, raw: Forecast, history: History, horizon: int) -> Forecast:
        steps = np.abs(np.diff(history.values))
        floor = WIDTH_FLOOR * (float(np.nanmean(steps)) if np.any(np.isfinite(steps)) else 1.0) or 1e-12
        upper: list[FloatArray] = []
        lower: list[FloatArray] = []
        for origin in tail_origins(len(history), horizon, self.origins):
            actual = history.values[origin + 1 : origin + 1 + horizon]
            try:
                past = self.factory().fit(history.upto(origin + 1)).predict(horizon)
            except ForecastError:
                continue
            seen = np.isfinite(actual)
            upper.append((actual - past.yhat)[seen] / np.maximum(past.hi - past.yhat, floor)[seen])
            lower.append((past.yhat - actual)[seen] / np.maximum(past.yhat - past.lo, floor)[seen])
        up = np.concatenate(upper) if upper else np.empty(0)
        down = np.concatenate(lower) if lower else np.empty(0)
        self.calibrated = len(up) >= MIN_SCORES
        if not self.calibrated:  # too short a tail to calibrate: the model's own interval, flagged
            return raw
        self.scale_hi = conformal_quantile(up)
        self.scale_lo = conformal_quantile(down)
        hi = raw.yhat + self.scale_hi * np.maximum(raw.hi - raw.yhat, floor)
        lo = raw.yhat - self.scale_lo * np.maximum(raw.yhat - raw.lo, floor)
        return ordered_forecast(raw.yhat, lo, hi)
