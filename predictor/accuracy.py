"""Live forecast accuracy, pure: each past forecast scored once its targets have arrived, and windows of scores.

A forecast made at origin ``t`` is scored against the demand that came: per point, the absolute error of ``yhat``,
the absolute error the naive forecast would have made from the same origin (the value at ``t`` held flat), and
whether the value fell inside ``[lo, hi]`` (the central 90 % interval). Over a window (the last 24 h, 7 days):

- ``mase``: the forecasts' summed absolute error over the naive one's on exactly the same (origin, target) pairs
  (below 1: better than holding the last value);
- ``coverage90``: the share of targets inside their interval (0.90 is calibrated);
- saturation precision and recall: a forecast *warned* when its saturation probability was at least
  ``WARNING_PROBABILITY``; it *saturated* when the demand over its horizon went above the capacity it was judged
  against. Precision: warnings that came true; recall: saturations that were warned of. ``None`` where nothing counts.

Worked: origin value 100, targets 110 and 130, yhat 108 and 120, intervals [100, 115] and [105, 125] → errors 2 and
10, naive errors 10 and 30, MASE 12 / 40 = 0.3, coverage 1 of 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from predictor.backtest import inside
from predictor.base import History

WARNING_PROBABILITY = 0.5
# a pool's live forecast is distrusted over a 24 h window of at least this many scored points (4 h of 1-minute
# steps × a 15-step horizon … fewer, and a bad hour decides) when worse than naive or badly covered
MIN_POINTS_TO_JUDGE = 240
WORST_COVERAGE = 0.7
DAY_SECONDS = 86_400.0
WINDOWS_SECONDS = {"24h": DAY_SECONDS, "7d": 7 * DAY_SECONDS}


@dataclass(frozen=True)
class ForecastScore:
    """One past forecast, scored: over its ``points`` targets that arrived."""

    origin_ts: float
    points: int
    abs_error: float
    naive_error: float
    covered: int
    warned: bool | None  # None: no capacity to judge saturation against
    saturated: bool | None


@dataclass(frozen=True)
class WindowAccuracy:
    window: str
    forecasts: int
    points: int
    mase: float | None
    coverage90: float | None
    saturation_precision: float | None
    saturation_recall: float | None


def score_forecast(
    origin_ts: float,
    points: Sequence[tuple[float, float, float, float]],
    actual: History,
    *,
    capacity: float | None,
    probability: float | None,
) -> ForecastScore | None:
    """The forecast's score against ``actual`` (the subject's history); None until its last target has arrived, or
    when the origin had no value to hold (no naive forecast to compare with)."""
    if not points or points[-1][0] > actual.end_ts + 1e-6:
        return None
    held = _value_at(actual, origin_ts)
    if held is None:
        return None
    scored = abs_error = naive_error = 0.0
    covered = 0
    peak = -math.inf
    for ts, yhat, lo, hi in points:
        value = _value_at(actual, ts, hold=False)
        if value is None:
            continue
        scored += 1
        abs_error += abs(value - yhat)
        naive_error += abs(value - held)
        covered += bool(inside(lo, hi, value))
        peak = max(peak, value)
    if not scored:
        return None
    judged = capacity is not None and capacity > 0 and probability is not None
    warned = (probability >= WARNING_PROBABILITY) if judged and probability is not None else None
    saturated = (peak > capacity) if judged and capacity is not None else None
    return ForecastScore(origin_ts, int(scored), abs_error, naive_error, covered, warned, saturated)


def _value_at(actual: History, ts: float, *, hold: bool = True) -> float | None:
    """The history's value at ``ts`` (its step); with ``hold``, the last value at or before it."""
    index = round((ts - actual.start_ts) / actual.step_seconds)
    if not 0 <= index < len(actual.values):
        return None
    if not hold:
        value = float(actual.values[index])
        return value if math.isfinite(value) else None
    finite = [float(v) for v in actual.values[: index + 1] if math.isfinite(v)]
    return finite[-1] if finite else None


@dataclass(frozen=True)
class ScoreSums:
    """What a window's accuracy is made of: sums over its forecasts' scores (a query can add them up)."""

    forecasts: int = 0
    points: int = 0
    abs_error: float = 0.0
    naive_error: float = 0.0
    covered: int = 0
    warned: int = 0  # among the forecasts judged for saturation
    saturated: int = 0
    warned_and_saturated: int = 0

    def accuracy(self, window: str) -> WindowAccuracy:
        return WindowAccuracy(
            window,
            self.forecasts,
            self.points,
            self.abs_error / self.naive_error if self.naive_error > 0 else None,
            self.covered / self.points if self.points else None,
            self.warned_and_saturated / self.warned if self.warned else None,
            self.warned_and_saturated / self.saturated if self.saturated else None,
        )


def window_accuracy(window: str, scores: Sequence[ForecastScore]) -> WindowAccuracy:
    """The accuracy over ``scores`` (the forecasts whose origin lies in the window)."""
    judged = [s for s in scores if s.warned is not None and s.saturated is not None]
    return ScoreSums(
        len(scores),
        sum(s.points for s in scores),
        math.fsum(s.abs_error for s in scores),
        math.fsum(s.naive_error for s in scores),
        sum(s.covered for s in scores),
        sum(1 for s in judged if s.warned),
        sum(1 for s in judged if s.saturated),
        sum(1 for s in judged if s.warned and s.saturated),
    ).accuracy(window)


def distrusted(accuracy: WindowAccuracy) -> str | None:
    """Why a pool's forecast should not lead its replicas (the last 24 h scored worse than naive, or its interval
    covered too little), or None: trusted, or too few points to judge."""
    if accuracy.points < MIN_POINTS_TO_JUDGE:
        return None
    if accuracy.mase is not None and accuracy.mase > 1.0:
        return f"its forecasts scored worse than naive over the last {accuracy.window} (MASE {accuracy.mase:.2f})"
    if accuracy.coverage90 is not None and accuracy.coverage90 < WORST_COVERAGE:
        return (
            f"its 90 % intervals covered {100 * accuracy.coverage90:.0f} % of the demand over the last "
            f"{accuracy.window} (under {100 * WORST_COVERAGE:.0f} %)"
        )
    return None
