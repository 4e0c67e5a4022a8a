"""Per-series model weighting: each member is scored by its recent rolling-origin error on the history's tail."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Self

import numpy as np

from predictor.backends.gaps import require_observed
from predictor.backends.intervals import ordered_forecast
from predictor.base import Forecast, Forecaster, ForecastError, History
from predictor.rolling import absorb, rolling_forecasts, tail_origins

MIN_OBSERVED = 2
NEAR_BEST = 1.25  # members within 25 % of the best tail error share the weight; the rest are dropped


@dataclass
class _Blend:
    """One horizon's weights, earned on the tail at the last fit, and the weighted members, fitted then and updated
    since; a member that fails an update leaves ``members`` and the others share its weight."""

    weights: dict[str, float]
    members: dict[str, Forecaster]

    def absorb(self, history: History) -> None:
        for name, member in list(self.members.items()):
            try:
                absorb(member, history)
            except ForecastError:
                del self.members[name]


class Ensemble:
    """Inverse-squared-error weighting of the members near the best on the last ``origins`` rolling origins.

    Members' MAE 10 and 12 (within 1.25 × 10) → weights ∝ 1/100 and 1/144 → 0.59 and 0.41; a member with MAE 20
    is dropped. ``weights`` records the choice after each ``predict``.

    Cost: the first ``predict`` of a horizon after a ``fit`` scores every member at ``origins`` tail origins of the
    fitted history (see :func:`rolling_forecasts`) and carries it on to the history's end: one fit and ``origins``
    updates per member. ``update`` only moves the weighted members on (their parameters kept) and keeps the
    weights: between refits the weights lag the tail by up to K origins, the price of not fitting six members at
    every origin. Every forecast still uses only the history up to its origin.
    """

    def __init__(self, members: Mapping[str, Callable[[], Forecaster]], origins: int = 3) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.name = "ensemble"
        self.members = dict(members)
        self.origins = origins
        self.weights: dict[str, float] = {}
        self._fitted: History | None = None  # what the members are scored and fitted on
        self._history: History | None = None  # what they forecast from: the fitted history, or a later update
        self._blends: dict[int, _Blend] = {}

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, "ensemble")
        self._fitted = self._history = history
        self._blends = {}
        return self

    def update(self, history: History) -> Self:
        """Move the weighted members on to ``history`` with their weights unchanged; a history that does not extend
        the last one is fitted instead."""
        if self._history is None or not history.extends(self._history):
            return self.fit(history)
        self._history = history
        for blend in self._blends.values():
            blend.absorb(history)
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._fitted is None or self._history is None:
            raise ForecastError("ensemble: predict called before fit")
        if horizon not in self._blends:
            blend = self._blends[horizon] = self._blend(self._fitted, horizon)
            if self._history is not self._fitted:
                blend.absorb(self._history)
        return self._combine(self._blends[horizon], horizon)

    def _blend(self, history: History, horizon: int) -> _Blend:
        """Score each member on the tail, carry it on to the origin, weight those near the best that forecast."""
        origins = sorted(tail_origins(len(history), horizon, self.origins))
        errors: dict[str, float] = {}
        fitted: dict[str, Forecaster] = {}
        failures: list[str] = []
        for name, factory in self.members.items():
            forecasts, member = rolling_forecasts(factory, history, origins, horizon)
            misses = [np.abs(history.values[o + 1 : o + 1 + horizon] - f.yhat) for o, f in forecasts.items()]
            scored = [float(np.nanmean(m)) for m in misses if np.any(np.isfinite(m))]  # all targets missing: skip
            errors[name] = float(np.mean(scored)) if scored else math.inf
            try:
                member = factory().fit(history) if member is None else absorb(member, history)
                member.predict(horizon)
            except ForecastError as exc:
                failures.append(f"{name}: {exc}")
            else:
                fitted[name] = member
        if not fitted:
            raise ForecastError("ensemble: every member failed (" + "; ".join(failures) + ")")
        best = min(errors[name] for name in fitted)
        if math.isinf(best):  # too short to score anyone: equal weights over the members that fit
            weights = {name: 1.0 for name in fitted}
        else:
            floor = max(best, 1e-12)
            weights = {n: 1.0 / max(errors[n], floor) ** 2 for n in fitted if errors[n] <= NEAR_BEST * best}
        return _Blend(weights, {name: fitted[name] for name in weights})

    def _combine(self, blend: _Blend, horizon: int) -> Forecast:
        forecasts: dict[str, Forecast] = {}
        for name, member in blend.members.items():
            try:
                forecasts[name] = member.predict(horizon)
            except ForecastError:
                continue
        if not forecasts:
            raise ForecastError("ensemble: every weighted member failed since the last fit")
        total = sum(blend.weights[name] for name in forecasts)
        self.weights = {name: blend.weights[name] / total for name in forecasts}
        # A weighted mean of ordered triples stays ordered: Σw·lo ≤ Σw·yhat ≤ Σw·hi.
        yhat = sum(w * forecasts[n].yhat for n, w in self.weights.items())
        lo = sum(w * forecasts[n].lo for n, w in self.weights.items())
        hi = sum(w * forecasts[n].hi for n, w in self.weights.items())
        return ordered_forecast(np.asarray(yhat), np.asarray(lo), np.asarray(hi))
