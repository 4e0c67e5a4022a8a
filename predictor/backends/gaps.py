"""Missing steps handled explicitly: counted, interpolated for fitting when a model needs a full series, never zero."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictor.base import FloatArray, ForecastError, History, NotEnoughHistory


def observed_count(values: FloatArray) -> int:
    """How many steps have a finite value."""
    return int(np.isfinite(values).sum())


def require_observed(history: History, minimum: int, who: str) -> None:
    """Raise NotEnoughHistory when fewer than ``minimum`` steps are observed, naming the model and the counts."""
    count = observed_count(history.values)
    if count < minimum:
        noun = "value" if minimum == 1 else "values"
        raise NotEnoughHistory(f"{who} needs at least {minimum} observed {noun}, got {count} (of {len(history)} steps)")


def forward_fill(values: FloatArray) -> FloatArray:
    """Each step's last observed value at or before it along the last axis (NaN before the first observation):
    [1, nan, 3] → [1, 1, 3]; a 2-D array (series × steps) is filled row by row."""
    index = np.where(np.isfinite(values), np.arange(values.shape[-1]), -1)
    np.maximum.accumulate(index, axis=-1, out=index)
    filled = np.take_along_axis(values, np.maximum(index, 0), axis=-1)
    return np.where(index >= 0, filled, np.nan)


@dataclass(frozen=True)
class FilledSeries:
    """The history between its first and last observation with interior gaps linearly interpolated.

    ``trailing_missing`` counts NaN steps after the last observation: a model fitted on ``values`` forecasts
    ``trailing_missing + h`` steps and keeps the last ``h`` (history ends in a 3-step gap → forecast 3 + h).
    """

    values: FloatArray
    leading_missing: int
    trailing_missing: int


def fill_gaps(values: FloatArray) -> FilledSeries:
    """Interpolate interior gaps linearly ([1, nan, nan, 4] → [1, 2, 3, 4]) and trim the edges; no zero filling."""
    finite = np.flatnonzero(np.isfinite(values))
    if len(finite) == 0:
        raise ForecastError("every value in the history is missing")
    first, last = int(finite[0]), int(finite[-1])
    inner = values[first : last + 1]
    positions = np.arange(len(inner))
    known = np.isfinite(inner)
    filled = np.interp(positions, positions[known], inner[known])
    return FilledSeries(filled, first, len(values) - 1 - last)
