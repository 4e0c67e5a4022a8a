"""Exponential smoothing (statsmodels ETSModel): additive errors, damped additive trend, daily season when detected."""

from __future__ import annotations

import warnings
from typing import Any, Self

import numpy as np

from predictor.backends.gaps import fill_gaps, require_observed
from predictor.backends.intervals import ordered_forecast
from predictor.backends.seasonality import detect_season
from predictor.base import INTERVAL_COVERAGE, Forecast, ForecastError, History

MIN_OBSERVED = 10
HEURISTIC_MIN = 20  # statsmodels' heuristic start needs 10 obs, or 2 full seasons; below 20 we estimate instead
SEASONS_KEPT = 3  # fit the last 3 days (3 × 144 = 432 steps at 600 s): old days add cost, not skill
NONSEASONAL_KEPT = 720


class ETS:
    """ETS(A, Ad, A|N) on the interpolated history's recent window; analytic prediction intervals."""

    def __init__(self, maxiter: int = 50) -> None:
        self.name = "ets"
        self.maxiter = maxiter
        self.season: int | None = None
        self._result: Any = None
        self._skip = 0
        self._end = 0

    def fit(self, history: History) -> Self:
        import pandas as pd  # type: ignore[import-untyped]
        from statsmodels.tsa.exponential_smoothing.ets import ETSModel

        require_observed(history, MIN_OBSERVED, "ets")
        filled = fill_gaps(history.values)
        self.season = detect_season(history)
        kept = SEASONS_KEPT * self.season if self.season else NONSEASONAL_KEPT
        values = filled.values[-kept:]
        if self.season and len(values) < 2 * self.season:
            self.season = None  # leading gaps trimmed the history below two full seasons
        self.name = f"ets[{self.season}]" if self.season else "ets"
        init = "heuristic" if len(values) >= max(HEURISTIC_MIN, 2 * (self.season or 0)) else "estimated"
        model = ETSModel(
            pd.Series(values),  # get_prediction needs an index to label its rows
            error="add",
            trend="add",
            damped_trend=True,
            seasonal="add" if self.season else None,
            seasonal_periods=self.season,
            initialization_method=init,
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._result = model.fit(disp=False, maxiter=self.maxiter)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise ForecastError(f"ets: fit failed on {len(values)} steps: {exc}") from exc
        self._skip = filled.trailing_missing
        self._end = len(values)
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._result is None:
            raise ForecastError("ets: predict called before fit")
        # The history may end in a gap of g steps: forecast g + h and keep the last h.
        start = self._end + self._skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frame = self._result.get_prediction(start=start, end=start + horizon - 1).summary_frame(
                alpha=1.0 - INTERVAL_COVERAGE
            )
        yhat = np.asarray(frame["mean"], dtype=np.float64)
        lo = np.asarray(frame["pi_lower"], dtype=np.float64)
        hi = np.asarray(frame["pi_upper"], dtype=np.float64)
        if not (np.all(np.isfinite(yhat)) and np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ForecastError("ets: the fitted model produced non-finite forecasts")
        return ordered_forecast(yhat, lo, hi)
