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
    donor: tuple[int, float, float] | None = None
    for k, residuals in enumerate(residuals_by_step, start=1):
        finite = residuals[np.isfinite(residuals)]
        if len(finite) >= MIN_RESIDUALS:
            low, high = np.quantile(finite, [LOWER_Q, UPPER_Q])
            donor = (k, float(low), float(high))
        elif donor is None:
            spread = float(np.max(np.abs(finite))) if len(finite) else 0.0
            donor = (k, -spread, spread)
        donor_step, low_k, high_k = donor
        scale = math.sqrt(k / donor_step)
        lo[k - 1] = yhat[k - 1] + low_k * scale
        hi[k - 1] = yhat[k - 1] + high_k * scale
    return ordered_forecast(yhat, lo, hi)
