"""Per-series model weighting: each member is scored by its recent rolling-origin error on the history's tail."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Self

import numpy as np

from predictor.backends.gaps import require_observed
from predictor.backends.intervals import ordered_forecast
from predictor.base import Forecast, Forecaster, ForecastError, History

MIN_OBSERVED = 2
NEAR_BEST = 1.25  # members within 25 % of the best tail error share the weight; the rest are dropped


def tail_origins(length: int, horizon: int, count: int) -> list[int]:
    """Up to ``count`` origins on the tail, latest first, each with a full horizon inside the history.

    Spaced by ceil(h/2) when the history allows, else by 1, never earlier than its middle: length 2,016, h 2,
    count 3 → [2013, 2012, 2011]; length 60, h 15, count 3 → [44, 43, 42].
    """
    latest = length - 1 - horizon
    earliest = length // 2
    if latest < earliest:
        return []
    stride = max(1, min(math.ceil(horizon / 2), (latest - earliest) // max(count - 1, 1)))
    return [o for o in range(latest, earliest - 1, -stride)][:count]


class Ensemble:
    """Inverse-squared-error weighting of the members near the best on the last ``origins`` rolling origins.

    Members' MAE 10 and 12 (within 1.25 × 10) → weights ∝ 1/100 and 1/144 → 0.59 and 0.41; a member with MAE 20
    is dropped. ``weights`` records the choice after each ``predict``.
    """

    def __init__(self, members: Mapping[str, Callable[[], Forecaster]], origins: int = 3) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.name = "ensemble"
        self.members = dict(members)
        self.origins = origins
        self.weights: dict[str, float] = {}
        self._history: History | None = None
        self._cache: dict[int, Forecast] = {}

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "ensemble")
        self._history = history
        self._cache = {}
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._history is None:
            raise ForecastError("ensemble: predict called before fit")
        if horizon not in self._cache:
            self._cache[horizon] = self._combine(self._history, horizon)
        return self._cache[horizon]

    def _tail_errors(self, history: History, horizon: int) -> dict[str, float]:
        """Mean absolute error of each member over the tail origins (only data up to each origin); inf if it failed."""
        errors: dict[str, list[float]] = {name: [] for name in self.members}
        for origin in tail_origins(len(history), horizon, self.origins):
            actual = history.values[origin + 1 : origin + 1 + horizon]
            if not np.any(np.isfinite(actual)):
                continue
            for name, factory in self.members.items():
                try:
                    forecast = factory().fit(history.upto(origin + 1)).predict(horizon)
                except ForecastError:
                    continue
                errors[name].append(float(np.nanmean(np.abs(actual - forecast.yhat))))
        return {name: float(np.mean(e)) if e else math.inf for name, e in errors.items()}

    def _combine(self, history: History, horizon: int) -> Forecast:
        errors = self._tail_errors(history, horizon)
        ranked = sorted(self.members, key=lambda name: errors[name])
        forecasts: dict[str, Forecast] = {}
        failures: list[str] = []
        for name in ranked:
            try:
                forecasts[name] = self.members[name]().fit(history).predict(horizon)
            except ForecastError as exc:
                failures.append(f"{name}: {exc}")
        if not forecasts:
            raise ForecastError("ensemble: every member failed (" + "; ".join(failures) + ")")
        best = min(errors[name] for name in forecasts)
        if math.isinf(best):  # too short to score anyone: equal weights over the members that fit
            raw = {name: 1.0 for name in forecasts}
        else:
            floor = max(best, 1e-12)
            raw = {n: 1.0 / max(errors[n], floor) ** 2 for n in forecasts if errors[n] <= NEAR_BEST * best}
        total = sum(raw.values())
        self.weights = {name: w / total for name, w in raw.items()}
        # A weighted mean of ordered triples stays ordered: Σw·lo ≤ Σw·yhat ≤ Σw·hi.
        yhat = sum(w * forecasts[n].yhat for n, w in self.weights.items())
        lo = sum(w * forecasts[n].lo for n, w in self.weights.items())
        hi = sum(w * forecasts[n].hi for n, w in self.weights.items())
        return ordered_forecast(np.asarray(yhat), np.asarray(lo), np.asarray(hi))
