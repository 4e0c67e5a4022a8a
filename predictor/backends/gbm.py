"""Gradient-boosted quantile regression (scikit-learn HistGradientBoostingRegressor) at the 5 %, 50 % and 95 % levels.

Direct multi-horizon: one model per quantile, trained on rows (origin t, step k) with k as a feature, so step 7 is
learnt from real 7-step-ahead outcomes rather than by feeding forecasts back in (recursive), which compounds errors.
"""

from __future__ import annotations

import functools
from typing import Any, Self

import numpy as np

from predictor.backends.gaps import forward_fill, require_observed
from predictor.backends.intervals import LOWER_Q, UPPER_Q, ordered_forecast
from predictor.backends.seasonality import time_of_day_features
from predictor.base import FloatArray, Forecast, ForecastError, History

QUANTILES = (LOWER_Q, 0.5, UPPER_Q)
LAGS = (1, 2, 3, 4, 6, 8, 12)
WINDOWS = (4, 12, 48)
MIN_OBSERVED = 12
MIN_ROWS = 20


def origin_features(values: FloatArray, held: FloatArray, origins: np.ndarray) -> FloatArray:
    """Per origin t, relative to the last value held at t: lags y[t−j] − y_held[t], rolling mean − y_held, rolling std.

    Differences, not levels: a series at 500,000 and one at 20 share the same shapes. A lag before the start or a
    missing step is NaN, which the boosted trees route on their own, never read as 0.
    """
    level = held[origins]
    columns: list[FloatArray] = []
    for lag in LAGS:
        source = origins - lag + 1  # lag 1 is y[t] itself (NaN when t is missing: a flag for a current gap)
        column = np.full(len(origins), np.nan)
        valid = source >= 0
        column[valid] = values[source[valid]] - level[valid]
        columns.append(column)
    cumsum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(held))])
    cumsq = np.concatenate([[0.0], np.cumsum(np.nan_to_num(held) ** 2)])
    for window in WINDOWS:
        start = np.maximum(origins + 1 - window, 0)
        count = origins + 1 - start
        mean = (cumsum[origins + 1] - cumsum[start]) / count
        var = np.maximum((cumsq[origins + 1] - cumsq[start]) / count - mean**2, 0.0)
        columns.extend([mean - level, np.sqrt(var)])
    return np.column_stack(columns)


@functools.cache
def _openmp() -> Any:
    """The process's thread pools, scanned once (a scan costs 15 ms, more than an update's predictions) and after
    scikit-learn has loaded its OpenMP runtime: a scan made before would not see it, and limit nothing."""
    import sklearn.ensemble  # noqa: F401
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    return ThreadpoolController()


class GBMQuantile:
    """Three quantile models on lag, rolling and time-of-day features; trained on the fitted history the first time
    a horizon is asked for.

    ``update`` keeps the trained trees and only recomputes the features of the new origin (three tree-ensemble
    predictions on h rows: about a millisecond against a second of training), so the trees lag the data by up to
    the K origins between refits.
    """

    def __init__(self, seed: int = 0, max_iter: int = 100, max_origins: int = 600) -> None:
        self.name = "gbm_quantile"
        self.seed = seed
        self.max_iter = max_iter
        self.max_origins = max_origins  # 600 origins × 15 steps = 9,000 rows: well under a second per model
        self._fitted: History | None = None  # what the trees learn from
        self._history: History | None = None  # what they forecast from: the fitted history, or a later update
        self._models: dict[int, list[Any]] = {}  # per horizon: the 5 %, 50 % and 95 % models

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "gbm_quantile")
        self._fitted = self._history = history
        self._models = {}
        return self

    def update(self, history: History) -> Self:
        """Forecast from ``history`` with the trees trained on the fitted one; a history that does not extend the
        last one is fitted instead."""
        if self._history is None or not history.extends(self._history):
            return self.fit(history)
        self._history = history
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._fitted is None or self._history is None:
            raise ForecastError("gbm_quantile: predict called before fit")
        # One OpenMP thread: on thousands of rows the thread start-up and spinning cost more than they save
        # (measured on 2 busy cores: 0.1 s single-threaded against 15-45 s with the default pool for 900 rows; and
        # 5 ms against 300 ms for the three predictions of an update).
        with _openmp().limit(limits=1, user_api="openmp"):
            if horizon not in self._models:
                self._models[horizon] = self._train(self._fitted, horizon)
            return self._forecast(self._models[horizon], self._history, horizon)

    def _train(self, history: History, horizon: int) -> list[Any]:
        values = history.values
        held = forward_fill(values)
        n = len(values)
        first = int(np.flatnonzero(np.isfinite(values))[0])
        # Training origins: the last max_origins with a held value and at least one step of future inside history.
        origins = np.arange(max(first, n - 1 - self.max_origins), n - 1)
        rows, targets = [], []
        base = origin_features(values, held, origins)
        for k in range(1, horizon + 1):
            usable = origins + k < n
            target = values[origins[usable] + k] - held[origins[usable]]
            keep = np.isfinite(target)
            rows.append(self._with_step(base[usable][keep], origins[usable][keep] + k, k, history))
            targets.append(target[keep])
        features = np.vstack(rows)
        y = np.concatenate(targets)
        if len(y) < MIN_ROWS:
            raise ForecastError(f"gbm_quantile needs at least {MIN_ROWS} training rows, got {len(y)} from {n} steps")
        return [self._quantile_model(q, features, y) for q in QUANTILES]

    def _forecast(self, models: list[Any], history: History, horizon: int) -> Forecast:
        held = forward_fill(history.values)
        last = np.array([len(history) - 1])
        last_features = origin_features(history.values, held, last)
        query = np.vstack([self._with_step(last_features, last + k, k, history) for k in range(1, horizon + 1)])
        # Quantile models fitted apart can cross; sorting per step restores lo ≤ median ≤ hi.
        lo, mid, hi = np.sort(np.column_stack([model.predict(query) for model in models]), axis=1).T + held[-1]
        return ordered_forecast(mid, lo, hi)

    def _quantile_model(self, quantile: float, features: FloatArray, y: FloatArray) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor

        model = HistGradientBoostingRegressor(
            loss="quantile",
            quantile=quantile,
            max_iter=self.max_iter,
            learning_rate=0.1,
            max_leaf_nodes=15,
            min_samples_leaf=max(5, len(y) // 200),
            random_state=self.seed,
        )
        return model.fit(features, y)

    @staticmethod
    def _with_step(base: FloatArray, target_index: np.ndarray, k: int, history: History) -> FloatArray:
        """Append the step k and the target's time of day (from start_ts + index × step)."""
        timestamps = history.start_ts + target_index * history.step_seconds
        steps = np.full((len(base), 1), float(k))
        return np.hstack([base, steps, time_of_day_features(timestamps.astype(np.float64))])
