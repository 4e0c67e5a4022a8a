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
from dataclasses import dataclass
from typing import Self

import numpy as np

from predictor.backends.gaps import require_observed
from predictor.backends.intervals import UPPER_Q, ordered_forecast
from predictor.base import FloatArray, Forecast, Forecaster, ForecastError, History
from predictor.rolling import absorb, rolling_forecasts, tail_origins

MIN_SCORES = 10
WIDTH_FLOOR = 0.01  # half-widths below 1 % of the mean step change are floored: a zero-width band still scales


def conformal_quantile(scores: FloatArray, level: float = UPPER_Q) -> float:
    """The ceil((m + 1) × level)-th smallest of m scores (the max when m < 19 at level 0.95)."""
    ordered = np.sort(scores)
    rank = min(math.ceil((len(ordered) + 1) * level), len(ordered))
    return float(ordered[rank - 1])


@dataclass(frozen=True)
class _Scales:
    """One horizon's conformal factors for the lower and upper half-widths, and the half-width floor they apply to."""

    lo: float
    hi: float
    floor: float


class Calibrated:
    """Wraps a forecaster factory; ``calibrated`` says whether the last ``predict`` had enough scores to rescale.

    Cost: the first ``predict`` of a horizon after a ``fit`` scores ``origins`` tail origins of the fitted history
    (12 by default) with one fit and 11 updates (:func:`~predictor.backends.ensemble.rolling_forecasts`). ``update``
    moves the wrapped model on (its parameters kept, or refitted if it has no ``update``) and keeps the scales:
    between refits the calibration lags the tail by up to K origins, the price of not scoring 12 origins at every
    origin. Every forecast still uses only the history up to its origin.
    """

    def __init__(self, forecaster_factory: Callable[[], Forecaster], origins: int = 12) -> None:
        self.factory = forecaster_factory
        self.origins = origins
        self.name = "calibrated"
        self.calibrated = False
        self.scale_lo = 1.0
        self.scale_hi = 1.0
        self._fitted: History | None = None  # what the scales are scored on
        self._history: History | None = None  # what the model forecasts from: the fitted history, or a later update
        self._model: Forecaster | None = None
        self._scales: dict[int, _Scales | None] = {}  # per horizon; None: too short a tail to calibrate

    def fit(self, history: History) -> Self:
        require_observed(history, 2, "calibrated")
        self._model = self.factory().fit(history)
        self.name = f"{self._model.name}+conformal"
        self._fitted = self._history = history
        self._scales = {}
        return self

    def update(self, history: History) -> Self:
        """Move the wrapped model on to ``history`` with the scales unchanged; a history that does not extend the
        last one is fitted instead."""
        if self._model is None or self._history is None or not history.extends(self._history):
            return self.fit(history)
        absorb(self._model, history)
        self._history = history
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._fitted is None or self._model is None:
            raise ForecastError("calibrated: predict called before fit")
        if horizon not in self._scales:
            self._scales[horizon] = self._score(self._fitted, horizon)
        scales = self._scales[horizon]
        raw = self._model.predict(horizon)
        self.calibrated = scales is not None
        if scales is None:  # too short a tail to calibrate: the model's own interval, flagged
            return raw
        self.scale_lo, self.scale_hi = scales.lo, scales.hi
        hi = raw.yhat + scales.hi * np.maximum(raw.hi - raw.yhat, scales.floor)
        lo = raw.yhat - scales.lo * np.maximum(raw.yhat - raw.lo, scales.floor)
        return ordered_forecast(raw.yhat, lo, hi)

    def _score(self, history: History, horizon: int) -> _Scales | None:
        """The conformal factors from the tail origins' forecasts, or None with fewer than MIN_SCORES per side."""
        steps = np.abs(np.diff(history.values))
        floor = WIDTH_FLOOR * (float(np.nanmean(steps)) if np.any(np.isfinite(steps)) else 1.0) or 1e-12
        upper: list[FloatArray] = []
        lower: list[FloatArray] = []
        origins = sorted(tail_origins(len(history), horizon, self.origins))
        for origin, past in rolling_forecasts(self.factory, history, origins, horizon)[0].items():
            actual = history.values[origin + 1 : origin + 1 + horizon]
            seen = np.isfinite(actual)
            upper.append((actual - past.yhat)[seen] / np.maximum(past.hi - past.yhat, floor)[seen])
            lower.append((past.yhat - actual)[seen] / np.maximum(past.yhat - past.lo, floor)[seen])
        up = np.concatenate(upper) if upper else np.empty(0)
        if len(up) < MIN_SCORES:
            return None
        return _Scales(conformal_quantile(np.concatenate(lower)), conformal_quantile(up), floor)
