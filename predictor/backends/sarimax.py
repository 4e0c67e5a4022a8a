"""ARIMA(1,1,1) with daily Fourier terms as regressors (statsmodels SARIMAX): a fast stand-in for a seasonal ARIMA.

A true seasonal ARIMA at 144 steps a day carries a 144-wide state and takes seconds per fit; three harmonics of the
day as regressors (6 columns) capture the daily shape in milliseconds. Missing steps stay NaN: the Kalman filter
skips them, so no value is invented.
"""

from __future__ import annotations

import warnings
from typing import Any, Self

import numpy as np

from predictor.backends.gaps import require_observed
from predictor.backends.intervals import ordered_forecast
from predictor.backends.seasonality import detect_season, fourier_terms
from predictor.base import INTERVAL_COVERAGE, FloatArray, Forecast, ForecastError, History

MIN_OBSERVED = 10
FOURIER_PAIRS = 3
SEASONS_KEPT = 3
NONSEASONAL_KEPT = 720


class SarimaxFourier:
    """SARIMAX(p, d, q) + daily Fourier regressors when a season is detected; bounded optimiser iterations."""

    def __init__(self, order: tuple[int, int, int] = (1, 1, 1), maxiter: int = 50) -> None:
        self.name = "sarimax"
        self.order = order
        self.maxiter = maxiter
        self.season: int | None = None
        self._result: Any = None
        self._future_ts: FloatArray = np.empty(0)
        self._step = 1.0

    def fit(self, history: History) -> Self:
        from statsmodels.tsa.statespace import sarimax as statsmodels_sarimax

        require_observed(history, MIN_OBSERVED, "sarimax")
        self.season = detect_season(history)
        kept = SEASONS_KEPT * self.season if self.season else NONSEASONAL_KEPT
        first = max(len(history) - kept, int(np.flatnonzero(np.isfinite(history.values))[0]))
        values = history.values[first:]
        timestamps = history.start_ts + history.step_seconds * np.arange(first, len(history), dtype=np.float64)
        exog = fourier_terms(timestamps, FOURIER_PAIRS) if self.season else None
        self.name = f"sarimax{self.order}+fourier" if self.season else f"sarimax{self.order}"
        self._future_ts = np.array([history.end_ts])
        self._step = history.step_seconds
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = statsmodels_sarimax.SARIMAX(values, exog=exog, order=self.order)
                self._result = model.fit(disp=False, maxiter=self.maxiter)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise ForecastError(f"sarimax: fit failed on {len(values)} steps: {exc}") from exc
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._result is None:
            raise ForecastError("sarimax: predict called before fit")
        timestamps = self._future_ts[0] + self._step * np.arange(1, horizon + 1)
        exog = fourier_terms(timestamps, FOURIER_PAIRS) if self.season else None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                forecast = self._result.get_forecast(steps=horizon, exog=exog)
                yhat = np.asarray(forecast.predicted_mean, dtype=np.float64)
                bounds = np.asarray(forecast.conf_int(alpha=1.0 - INTERVAL_COVERAGE), dtype=np.float64)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise ForecastError(f"sarimax: forecast failed: {exc}") from exc
        if not (np.all(np.isfinite(yhat)) and np.all(np.isfinite(bounds))):
            raise ForecastError("sarimax: the fitted model produced non-finite forecasts")
        return ordered_forecast(yhat, bounds[:, 0], bounds[:, 1])
