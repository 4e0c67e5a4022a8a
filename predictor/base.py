"""One interface for every forecaster: ``fit(history) -> self`` and ``predict(horizon) -> Forecast``.

History is a regular series: equally spaced steps of ``step_seconds``, a missing step is NaN (an agent away, a
collection gap — never read as zero load). Forecasts carry a point value and a central 90 % interval per step.
Heavy imports (statsmodels, scikit-learn, torch) live inside the backend modules that need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Self

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
INTERVAL_COVERAGE = 0.90


class ForecastError(Exception):
    """A forecaster could not fit or predict; the message says why (too little history, all values missing, ...)."""


class NotEnoughHistory(ForecastError):
    """Too few observed steps to fit, or to score and bound a forecast: the forecaster is still warming up on this
    series, not failing (a new pool's first minutes)."""


@dataclass(frozen=True)
class History:
    """Values at ``start_ts + i × step_seconds``; NaN where a step has no value."""

    values: FloatArray
    step_seconds: float
    start_ts: float = 0.0

    def __post_init__(self) -> None:
        if self.values.ndim != 1:
            raise ValueError("history values must be one-dimensional")
        if not self.step_seconds > 0:
            raise ValueError(f"step_seconds must be positive, got {self.step_seconds}")

    def __len__(self) -> int:
        return len(self.values)

    @property
    def end_ts(self) -> float:
        """The timestamp of the last step (the forecast origin)."""
        return self.start_ts + (len(self.values) - 1) * self.step_seconds

    def upto(self, steps: int) -> History:
        """The first ``steps`` values: what was known at origin ``steps - 1``."""
        return History(self.values[:steps], self.step_seconds, self.start_ts)

    def extends(self, earlier: History) -> bool:
        """Whether this is ``earlier`` with zero or more steps appended (same step, start and values, NaN where NaN):
        only then may a model's update keep what was estimated on ``earlier``."""
        n = len(earlier)
        return (
            self.step_seconds == earlier.step_seconds
            and self.start_ts == earlier.start_ts
            and len(self) >= n
            and bool(np.array_equal(self.values[:n], earlier.values, equal_nan=True))
        )


@dataclass(frozen=True)
class Forecast:
    """Steps 1..h after the origin: point values and the central 90 % interval (``lo <= yhat <= hi``), and, from a
    forecaster that predicts them, its quantiles at ``levels`` (``quantiles[k, i]``: step k + 1 at ``levels[i]``,
    ascending in both), which :mod:`predictor.distribution` reads before it falls back on the band."""

    yhat: FloatArray
    lo: FloatArray
    hi: FloatArray
    levels: tuple[float, ...] = ()
    quantiles: FloatArray | None = None  # (horizon, len(levels))

    def __post_init__(self) -> None:
        if not (len(self.yhat) == len(self.lo) == len(self.hi)):
            raise ValueError("yhat, lo and hi must have the same length")
        if (self.quantiles is None) != (not self.levels):
            raise ValueError("levels and quantiles come together")
        if self.quantiles is not None and self.quantiles.shape != (len(self.yhat), len(self.levels)):
            raise ValueError(f"quantiles must be (horizon, levels) = ({len(self.yhat)}, {len(self.levels)})")

    @property
    def horizon(self) -> int:
        return len(self.yhat)


class Forecaster(Protocol):
    """Fit on the history up to an origin, then forecast the next ``horizon`` steps; ``name`` identifies it."""

    name: str

    def fit(self, history: History) -> Self: ...

    def predict(self, horizon: int) -> Forecast: ...


def non_negative(forecast: Forecast) -> Forecast:
    """The forecast with nothing below zero: every quantity the loop forecasts (a request rate, bytes, a share of a
    KV cache) is never negative, whatever a model's band says (a band of 0.86 ± 6.3 requests/s reads 0 to 7.2)."""
    quantiles = None if forecast.quantiles is None else np.maximum(forecast.quantiles, 0.0)
    return Forecast(
        np.maximum(forecast.yhat, 0.0),
        np.maximum(forecast.lo, 0.0),
        np.maximum(forecast.hi, 0.0),
        forecast.levels,
        quantiles,
    )
