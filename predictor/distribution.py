"""A forecast step read as a distribution: its quantile at any level, and where a capacity sits in it.

Per step, the points (zᵢ, vᵢ) — zᵢ the standard normal quantile of each level the forecast knows, vᵢ the demand
there — are joined by straight lines in z and carried past the outermost points along the outermost segments. The
levels are the band's (``lo`` at 5 %, ``yhat`` at 50 %, ``hi`` at 95 %) and every level of the forecaster's own
quantiles (:attr:`predictor.base.Forecast.levels`), which win where both say. With the band alone that is a split
normal: each side a normal whose 90 % half-width is that side's half of the band (yhat 100, hi 120 → the 99 % point
100 + 20 × 2.326 / 1.645 = 128.3). With a quantile model's levels it follows the model's own tail (its 99 % point,
not a normal's guess from the 95 %).
"""

from __future__ import annotations

import functools
from statistics import NormalDist

import numpy as np

from predictor.base import INTERVAL_COVERAGE, FloatArray, Forecast

LOWER_LEVEL = round((1.0 - INTERVAL_COVERAGE) / 2.0, 12)  # the band's lo: 0.05
UPPER_LEVEL = 1.0 - LOWER_LEVEL  # its hi: 0.95
# The levels the quantile forecasters give (the prior, the smoothing family): the band's, the quartiles, and the
# upper tail an attainment target of 0.9 to 0.995 is read from.
LEVELS: tuple[float, ...] = (LOWER_LEVEL, 0.25, 0.5, 0.75, 0.9, UPPER_LEVEL, 0.98, 0.99, 0.995)
_NORMAL = NormalDist()


@functools.lru_cache(maxsize=64)
def z_of(level: float) -> float:
    """The standard normal quantile: 0.95 → 1.645, 0.99 → 2.326, 0.5 → 0."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"a quantile level must be in (0, 1), got {level}")
    return _NORMAL.inv_cdf(level)


def points(forecast: Forecast) -> tuple[FloatArray, FloatArray]:
    """(z, values): the levels the forecast knows in standard units, ascending, and its values there, (steps, z)."""
    columns: dict[float, FloatArray] = {LOWER_LEVEL: forecast.lo, 0.5: forecast.yhat, UPPER_LEVEL: forecast.hi}
    if forecast.quantiles is not None:
        for i, level in enumerate(forecast.levels):
            columns[level] = forecast.quantiles[:, i]
    levels = sorted(columns)
    z = np.array([z_of(level) for level in levels])
    values = np.column_stack([columns[level] for level in levels])
    return z, np.maximum.accumulate(values, axis=1)  # a quantile never falls as its level rises


def quantile(forecast: Forecast, level: float) -> FloatArray:
    """Each step's quantile at ``level`` (module docstring): the band alone, yhat 100, hi 120, 0.99 → 128.3."""
    z, values = points(forecast)
    target = z_of(level)
    # the segment holding the target is the same for every step: inside the points, or the outermost one
    i = min(max(int(np.searchsorted(z, target)) - 1, 0), len(z) - 2)
    share = (target - z[i]) / (z[i + 1] - z[i])
    found: FloatArray = values[:, i] + share * (values[:, i + 1] - values[:, i])
    return found


def standard_thresholds(forecast: Forecast, capacity: float) -> FloatArray:
    """Where ``capacity`` sits in each step's distribution, in standard units: P(demand > capacity) = 1 − Φ(z).
    ±inf where the distribution is flat on that side (a certainty); the middle of a flat stretch at the capacity
    (the band [100, 100, 100] against 100 → 0: even odds)."""
    z, values = points(forecast)
    return np.array([_inverse(capacity, z, row) for row in values])


def _inverse(capacity: float, z: FloatArray, values: FloatArray) -> float:
    """The z at which the piecewise-linear quantile function reaches ``capacity`` (see standard_thresholds)."""
    below, above = capacity < values[0], capacity > values[-1]
    if below or above:
        end = 0 if below else -1
        inner = 1 if below else -2
        slope = (values[end] - values[inner]) / (z[end] - z[inner])
        if slope <= 0:
            return -np.inf if below else np.inf
        return float(z[end] + (capacity - values[end]) / slope)
    at = np.flatnonzero(values == capacity)
    if len(at):  # on a point, or a flat stretch of points: its middle
        return float((z[at[0]] + z[at[-1]]) / 2.0)
    i = int(np.searchsorted(values, capacity)) - 1  # values[i] < capacity < values[i + 1]
    share = (capacity - values[i]) / (values[i + 1] - values[i])
    return float(z[i] + share * (z[i + 1] - z[i]))
