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
from predictor.base import INTERVAL_COVERAGE, Forecast, ForecastError, History

MIN_OBSERVED = 10
FOURIER_PAIRS = 3
SEASONS_KEPT = 3
NONSEASONAL_KEPT = 720


class SarimaxFourier:
    """SARIMAX(p, d, q) + daily Fourier regressors when a season is detected; bounded optimiser iterations.

    ``update`` keeps the estimated coefficients and re-runs the Kalman filter from the fitted window's first step
    over the longer history (statsmodels' ``results.append(..., refit=False)``, but also seeing a gap filled late):
    exactly the state the fit's own filter would have reached, in about 20 ms against a second or more of
    optimisation.
    """

    def __init__(self, order: tuple[int, int, int] = (1, 1, 1), maxiter: int = 50) -> None:
        self.name = "sarimax"
        self.order = order
        self.maxiter = maxiter
        self.season: int | None = None
        self._result: Any = None
        self._seen: History | None = None  # the history last fitted or updated on
        self._first = 0  # the window's first step, as an index into the history

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "sarimax")
        self.season = detect_season(history)
        kept = SEASONS_KEPT * self.season if self.season else NONSEASONAL_KEPT
        self._first = max(len(history) - kept, int(np.flatnonzero(np.isfinite(history.values))[0]))
        self.name = f"sarimax{self.order}+fourier" if self.season else f"sarimax{self.order}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._result = self._model(history).fit(disp=False, maxiter=self.maxiter)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise ForecastError(f"sarimax: fit failed on {len(history) - self._first} steps: {exc}") from exc
        self._seen = history
        return self

    def update(self, history: History) -> Self:
        """Filter the fitted window, grown to ``history``'s end, with the fitted coefficients; a history that does
        not extend the fitted one, or crosses into a newly detected season, is fitted instead."""
        if self._seen is None or not history.extends(self._seen) or detect_season(history) != self.season:
            return self.fit(history)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # cov_type none: the parameters' covariance (200 ms of numerical scores) is not needed to forecast
                self._result = self._model(history).filter(self._result.params, cov_type="none")
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise ForecastError(f"sarimax: update failed on {len(history) - self._first} steps: {exc}") from exc
        self._seen = history
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._result is None or self._seen is None:
            raise ForecastError("sarimax: predict called before fit")
        timestamps = np.arange(1, horizon + 1, dtype=np.float64) * self._seen.step_seconds + self._seen.end_ts
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

    def _model(self, history: History) -> Any:
        """The state-space model of the history from the window's first step, with its Fourier columns."""
        from statsmodels.tsa.statespace import sarimax as statsmodels_sarimax

        timestamps = np.arange(self._first, len(history), dtype=np.float64) * history.step_seconds + history.start_ts
        exog = fourier_terms(timestamps, FOURIER_PAIRS) if self.season else None
        return statsmodels_sarimax.SARIMAX(history.values[self._first :], exog=exog, order=self.order)
