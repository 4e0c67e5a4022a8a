"""The demand prior (:mod:`predictor.prior.model`) as a :class:`~predictor.base.Forecaster`: quantiles from a model
learned across many series, so a pool forecasts well from its first hour, before it has a past of its own to learn
from. ``yhat`` is the median, the band the 5 % and 95 % quantiles, and every level the model has travels with the
forecast (:attr:`~predictor.base.Forecast.levels`), for the policy's bound and the saturation estimate.
"""

from __future__ import annotations

from typing import Self

import numpy as np

from predictor.backends.gaps import require_observed
from predictor.base import Forecast, ForecastError, History
from predictor.distribution import LOWER_LEVEL, UPPER_LEVEL
from predictor.prior.model import DemandPrior, shipped

MIN_OBSERVED = 1  # a pool forecasts from its first rolled-up minute: what the prior knows is what it needs


def prior_forecast(prior: DemandPrior, quantiles: np.ndarray) -> Forecast:
    """A Forecast from one origin's (horizon, levels) quantiles of ``prior``."""
    levels = prior.levels
    return Forecast(
        quantiles[:, levels.index(0.5)].copy(),
        quantiles[:, levels.index(LOWER_LEVEL)].copy(),
        quantiles[:, levels.index(UPPER_LEVEL)].copy(),
        levels,
        np.ascontiguousarray(quantiles),
    )


class PriorForecaster:
    """The shipped prior (or the one given) at the history's last step."""

    name = "prior"

    def __init__(self, prior: DemandPrior | None = None) -> None:
        self.prior = prior or shipped()
        self._history: History | None = None

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, self.name)
        self._history = history
        return self

    def update(self, history: History) -> Self:
        """Nothing is estimated per series: an update is a fit."""
        return self.fit(history)

    def predict(self, horizon: int) -> Forecast:
        if self._history is None:
            raise ForecastError("prior: predict called before fit")
        history = self._history
        origin = np.array([len(history) - 1])
        quantiles = self.prior.quantiles(history.values, history.step_seconds, origin, range(1, horizon + 1))
        return prior_forecast(self.prior, quantiles[0])
