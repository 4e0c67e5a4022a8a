"""Central 90 % intervals from empirical h-step residuals, the honest default for models without their own."""

from __future__ import annotations

import math

import numpy as np

from predictor.base import INTERVAL_COVERAGE, FloatArray, Forecast

MIN_RESIDUALS = 5
LOWER_Q = (1.0 - INTERVAL_COVERAGE) / 2.0  # 0.05
UPPER_Q = 1.0 - LOWER_Q  # 0.95


def ordered_forecast(yhat: FloatArray, lo: FloatArray, hi: FloatArray) -> Forecast:
    """A Forecast with ``lo <= yhat <= hi`` enforced (a skewed band may sit on one side of the point value)."""
    yhat = np.asarray(yhat, dtype=np.float64)
    return Forecast(yhat, np.minimum(np.asarray(lo, dtype=np.float64), yhat), np.maximum(hi, yhat))


def residual_band(yhat: FloatArray, residuals_by_step: list[FloatArray]) -> Forecast:
    """Step k's interval is yhat + the 5 % and 95 % quantiles of that step's residuals (actual − forecast).

    A step with fewer than 5 residuals (short history) borrows the last step that has enough and widens it as a
    random walk would: step 12 borrowing step 3 → × sqrt(12 / 3) = × 2.
    """
    lo = np.empty(len(yhat))
    hi = np.empty(len(yhat))
    counts, lows, highs, spreads = _quantiles_by_step(residuals_by_step)
    donor: tuple[int, float, float] | None = None
    for k in range(1, len(residuals_by_step) + 1):
        if counts[k - 1] >= MIN_RESIDUALS:
            donor = (k, float(lows[k - 1]), float(highs[k - 1]))
        elif donor is None:
            donor = (k, -float(spreads[k - 1]), float(spreads[k - 1]))
        donor_step, low_k, high_k = donor
        scale = math.sqrt(k / donor_step)
        lo[k - 1] = yhat[k - 1] + low_k * scale
        hi[k - 1] = yhat[k - 1] + high_k * scale
    return ordered_forecast(yhat, lo, hi)


def _quantiles_by_step(residuals_by_step: list[FloatArray]) -> tuple[np.ndarray, FloatArray, FloatArray, FloatArray]:
    """Per step: how many finite residuals, their 5 % and 95 % quantiles (numpy's linear rule, all steps in one
    sort) and their largest magnitude (0 with none)."""
    width = max((len(r) for r in residuals_by_step), default=0)
    padded = np.full((len(residuals_by_step), max(width, 1)), np.nan)
    for k, residuals in enumerate(residuals_by_step):
        padded[k, : len(residuals)] = residuals
    ordered = np.sort(padded, axis=1)  # NaN last
    counts = np.isfinite(padded).sum(axis=1)
    rows = np.arange(len(ordered))

    def at(q: float) -> FloatArray:
        position = q * np.maximum(counts - 1, 0)
        low = np.floor(position).astype(int)
        high = np.minimum(low + 1, np.maximum(counts - 1, 0))
        value: FloatArray = ordered[rows, low] + (position - low) * (ordered[rows, high] - ordered[rows, low])
        return value

    spreads = np.where(counts > 0, np.nanmax(np.abs(np.where(np.isfinite(padded), padded, 0.0)), axis=1), 0.0)
    return counts, at(LOWER_Q), at(UPPER_Q), spreads
