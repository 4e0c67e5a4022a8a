"""Seasonality detected from the data: a daily season when the history covers at least two days at its step."""

from __future__ import annotations

import math

import numpy as np

from predictor.base import FloatArray, History

DAY_SECONDS = 86_400.0
MIN_SEASONS = 2


def daily_period(step_seconds: float) -> int:
    """Steps per day: 600 s steps → 86,400 / 600 = 144 steps."""
    return round(DAY_SECONDS / step_seconds)


def detect_season(history: History) -> int | None:
    """The daily period in steps when the history spans ≥ 2 days of it, else ``None`` (no season to exploit).

    A 2,016-row history at 600 s covers 14 days ≥ 2 × 144 steps → 144; 60 rows at 60 s cover 1 hour → ``None``.
    """
    period = daily_period(history.step_seconds)
    if period < 2 or len(history) < MIN_SEASONS * period:
        return None
    return period


def time_of_day_features(timestamps: FloatArray) -> FloatArray:
    """Columns sin and cos of the daily phase: 06:00 UTC → phase π/2 → (1, 0); continuous across midnight."""
    phase = 2.0 * math.pi * np.mod(timestamps, DAY_SECONDS) / DAY_SECONDS
    return np.column_stack([np.sin(phase), np.cos(phase)])


def fourier_terms(timestamps: FloatArray, pairs: int) -> FloatArray:
    """``pairs`` daily harmonics (sin, cos of k × phase for k = 1..pairs): 3 pairs → 6 smooth columns."""
    phase = 2.0 * math.pi * np.mod(timestamps, DAY_SECONDS) / DAY_SECONDS
    columns = [f(k * phase) for k in range(1, pairs + 1) for f in (np.sin, np.cos)]
    return np.column_stack(columns)
