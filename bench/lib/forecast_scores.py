"""How good a forecaster's forecasts were on one trace, where the policy and the alerts read them.

- ``coverage``: the share of origins whose demand at the decision step (the startup ahead) came in at or under the
  forecast's quantile at the attainment target: 0.99 is calibrated for a 0.99 target.
- ``mase``: the median's mean absolute error at the decision step over the naive forecast's (the last value held)
  on the same origins: below 1, better than naive.
- saturation: the demand over the next 15 minutes *saturates* when it passes the trace's 90th percentile (after the
  warm-up); the forecast *warns* when :func:`predictor.saturation.saturation` gives it a probability of at least
  0.5, the naive alarm when the last value is already past it. Precision, recall and F1 of both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from bench.lib.origin_forecasts import OriginTable, table_forecast
from predictor.backends.gaps import forward_fill
from predictor.base import History
from predictor.saturation import saturation

SATURATION_SECONDS = 900.0
SATURATION_PERCENTILE = 90.0
WARNING = 0.5


@dataclass(frozen=True)
class Alarms:
    precision: float | None
    recall: float | None
    f1: float | None


@dataclass(frozen=True)
class ForecastQuality:
    coverage: float | None
    mase: float | None
    events: int
    saturation: Alarms
    naive_saturation: Alarms

    def row(self) -> dict[str, object]:
        return asdict(self)


def saturation_steps(step_seconds: float) -> int:
    return max(1, math.ceil(SATURATION_SECONDS / step_seconds - 1e-9))


def quality(history: History, table: OriginTable, level: float, step: int, warm: int) -> ForecastQuality:
    """The scores of ``table`` on ``history`` from origin ``warm`` on (see the module docstring)."""
    y = history.values
    n = len(y)
    origins = np.arange(warm, n - step)
    target = y[origins + step]
    upper, median = table.at(level, step)[origins], table.at(0.5, step)[origins]
    filled = forward_fill(y)
    held = filled[origins]
    scored = np.isfinite(target) & np.isfinite(upper) & np.isfinite(held)
    coverage = float(np.mean(target[scored] <= upper[scored] + 1e-9)) if scored.any() else None
    naive_error = float(np.sum(np.abs(target[scored] - held[scored])))
    mase = float(np.sum(np.abs(target[scored] - median[scored]))) / naive_error if naive_error > 0 else None
    horizon = saturation_steps(history.step_seconds)
    observed = y[warm:][np.isfinite(y[warm:])]
    threshold = float(np.percentile(observed, SATURATION_PERCENTILE)) if len(observed) else math.nan
    warned, naive, events = [], [], []
    if math.isfinite(threshold) and threshold > 0 and table.quantiles.shape[1] >= horizon:
        for t in range(warm, n - horizon):
            ahead = y[t + 1 : t + 1 + horizon]
            rows = table.quantiles[t, :horizon]
            if not (np.any(np.isfinite(ahead)) and np.all(np.isfinite(rows)) and math.isfinite(filled[t])):
                continue
            events.append(bool(np.nanmax(ahead) > threshold))
            warned.append(saturation(table_forecast(rows), threshold, history.step_seconds).probability >= WARNING)
            naive.append(bool(filled[t] > threshold))
    return ForecastQuality(coverage, mase, sum(events), alarms(warned, events), alarms(naive, events))


def alarms(warned: list[bool], events: list[bool]) -> Alarms:
    """Precision, recall and F1 of ``warned`` against ``events`` (None where nothing counts)."""
    hits = sum(1 for w, e in zip(warned, events, strict=True) if w and e)
    precision = hits / sum(warned) if any(warned) else None
    recall = hits / sum(events) if any(events) else None
    if precision is None or recall is None:
        return Alarms(precision, recall, None)
    f1 = 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)
    return Alarms(precision, recall, f1)
