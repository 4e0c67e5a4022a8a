"""The baselines everything must beat: the last observed value, and the value one season (a day) ago."""

from __future__ import annotations

import math
from typing import Self

import numpy as np

from predictor.backends.gaps import forward_fill, require_observed
from predictor.backends.intervals import residual_band
from predictor.backends.seasonality import detect_season
from predictor.base import FloatArray, Forecast, ForecastError, History

MIN_OBSERVED = 2


def lagged_residuals(values: FloatArray, lag: int, held: FloatArray | None = None) -> FloatArray:
    """actual[j] − last-observed[j − lag]: the errors of forecasting ``lag`` steps ahead with a held value
    (``held``: ``values`` forward-filled, when the caller has it already).

    values [1, 2, 4], lag 1 → [2 − 1, 4 − 2] = [1, 2]; NaN where the actual is missing (dropped later).
    """
    if lag >= len(values):
        return np.empty(0)
    held = forward_fill(values) if held is None else held
    return values[lag:] - held[:-lag]


class Naive:
    """Last observed value for every step; interval from the quantiles of its own in-sample h-step residuals."""

    name = "naive"

    def __init__(self) -> None:
        self._values: FloatArray | None = None

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, self.name)
        self._values = np.array(history.values, dtype=np.float64)
        return self

    def predict(self, horizon: int) -> Forecast:
        values = _fitted(self._values, self.name)
        held = forward_fill(values)
        yhat = np.full(horizon, held[-1])  # the history may end in a gap: hold the last value seen
        return residual_band(yhat, [lagged_residuals(values, k, held) for k in range(1, horizon + 1)])


class SeasonalNaive:
    """The value one season ago (a day, detected from the data); no season detected → the naive forecast.

    ``season`` is the period in steps or ``None``; ``name`` says which: "seasonal_naive[144]" or
    "seasonal_naive[none→naive]".
    """

    def __init__(self) -> None:
        self.name = "seasonal_naive"
        self.season: int | None = None
        self._values: FloatArray | None = None

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "seasonal_naive")
        self._values = np.array(history.values, dtype=np.float64)
        self.season = detect_season(history)
        self.name = f"seasonal_naive[{self.season}]" if self.season else "seasonal_naive[none→naive]"
        return self

    def predict(self, horizon: int) -> Forecast:
        values = _fitted(self._values, self.name)
        held = forward_fill(values)
        n = len(values)
        lags = [self._lag(k) for k in range(1, horizon + 1)]
        # Step k is forecast by the step lag_k before it; lag_k ≥ k, so the source is never past the origin.
        # season 144, k = 3 → lag 144 → source index n − 1 + 3 − 144; a missing source holds the value before it.
        yhat = np.array([held[n - 1 + k - lag] for k, lag in zip(range(1, horizon + 1), lags, strict=True)])
        if not np.all(np.isfinite(yhat)):
            yhat = np.where(np.isfinite(yhat), yhat, held[-1])
        return residual_band(yhat, [lagged_residuals(values, lag, held) for lag in lags])

    def _lag(self, k: int) -> int:
        """Steps between a target and its source: k for naive, the next multiple of the season otherwise."""
        if self.season is None:
            return k
        return self.season * math.ceil(k / self.season)


def _fitted(values: FloatArray | None, name: str) -> FloatArray:
    if values is None:
        raise ForecastError(f"{name}: predict called before fit")
    return values
