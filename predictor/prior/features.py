"""What the history up to an origin says about the demand ``h`` steps later, scale-free: the prior's inputs.

Every feature is a ratio to the origin's short-term **level** ``L`` — the mean of the last ``LEVEL_SECONDS`` of
demand (one step at 10-minute steps), floored at ``FLOOR`` of the mean over ``HISTORY_SECONDS`` up to the origin, so
a pool that went quiet for a day still has a scale (a burst after it is 20× that floor, not 10⁹× a rounding error) —
so a pool at 500,000 tokens/s and one at 0.2 requests/s share the same shapes, and the model's target is
``y[t + h] / L[t]``: a forecast is its quantiles times ``L``. A history with no demand at all has no scale
(``L`` 0): nothing to learn from, and nothing but 0 to forecast. Gaps hold the last observed value (never zero).

Features at origin t for a target h steps ahead (``FEATURES``, in order):

- ``lag0``..``lag5``: the last six values;
- ``mean_1h``, ``mean_6h``, ``mean_1d``; ``max_1h``, ``max_6h``, ``max_1d``: trailing means and peaks;
- ``vol_1h``, ``vol_6h``: the mean absolute one-step change (how jumpy the series is); ``std_6h``;
- ``zero_1d``: the share of empty steps over the last day (a pool that idles, then bursts);
- ``same_time_1d``: the value one day before the target; ``same_time_mean``: its mean over the past days at the
  target's time of day, and ``past_days`` how many there were (0: no day of history yet);
- ``horizon_steps``, ``horizon_seconds``, ``step_seconds``.

No clock feature: a prior trained on one trace's time zone would carry its peak hours to every pool; the daily
shape comes from the pool's own past days. Trailing windows are in time, so 1-minute and 10-minute series read the
same hour, and none reaches back past ``HISTORY_SECONDS`` (two days, what the forecast loop reads of a pool): the
features of every origin of a long trace, computed at once, are the ones the loop computes from its two days.
Computed for any set of origins in O(n log n) (a sparse table answers the trailing maxima).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.backends.gaps import forward_fill
from predictor.base import FloatArray

LEVEL_SECONDS = 600.0
FLOOR = 0.05
HOUR_S = 3_600.0
DAY_S = 86_400.0
HISTORY_SECONDS = 2 * DAY_S
LAGS = 6
SEASON_DAYS = 2
FEATURES: tuple[str, ...] = (
    *(f"lag{j}" for j in range(LAGS)),
    "mean_1h",
    "mean_6h",
    "mean_1d",
    "max_1h",
    "max_6h",
    "max_1d",
    "vol_1h",
    "vol_6h",
    "std_6h",
    "zero_1d",
    "same_time_1d",
    "same_time_mean",
    "past_days",
    "horizon_steps",
    "horizon_seconds",
    "step_seconds",
)


@dataclass(frozen=True)
class OriginFeatures:
    """``rows[i, k]``: the features of origin ``origins[i]`` for horizon ``horizons[k]``; ``level[i]`` its scale."""

    origins: np.ndarray
    horizons: tuple[int, ...]
    rows: FloatArray  # (origins, horizons, features)
    level: FloatArray

    def flat(self) -> FloatArray:
        """Every (origin, horizon) row, origin-major: what a model predicts in one call."""
        return self.rows.reshape(-1, self.rows.shape[2])


def steps_in(seconds: float, step_seconds: float) -> int:
    """A window in time as whole steps, at least one: an hour at 60 s is 60, at 600 s 6; 10 minutes at 600 s is 1."""
    return max(1, round(seconds / step_seconds))


def origin_features(
    values: FloatArray, step_seconds: float, origins: np.ndarray, horizons: Sequence[int]
) -> OriginFeatures:
    """The features of each origin (indices into ``values``, every value up to and including it known) for each
    horizon in steps; nothing after an origin is read."""
    x = np.nan_to_num(forward_fill(values), nan=0.0)
    origins = np.asarray(origins, dtype=np.int64)
    window = _Windows(x, origins)
    hour, day = steps_in(HOUR_S, step_seconds), steps_in(DAY_S, step_seconds)
    day_mean = window.mean(day)
    history = steps_in(HISTORY_SECONDS, step_seconds)
    level = np.maximum(window.mean(steps_in(LEVEL_SECONDS, step_seconds)), FLOOR * window.mean(history))
    change = np.abs(np.diff(x, prepend=x[:1]))
    base = [np.where(origins >= j, x[np.maximum(origins - j, 0)], np.nan) for j in range(LAGS)]
    base += [window.mean(hour), window.mean(6 * hour), day_mean]
    base += [window.max(hour), window.max(6 * hour), window.max(day)]
    changes = _Windows(change, origins)
    base += [changes.mean(hour), changes.mean(6 * hour), window.std(6 * hour)]
    with np.errstate(divide="ignore", invalid="ignore"):  # L 0 (no demand yet): NaN features, a forecast of 0
        scaled = np.column_stack(base) / level[:, None]
    zero_share = _Windows((x == 0).astype(np.float64), origins).mean(day)
    steps = np.asarray(horizons, dtype=np.int64)
    same_time, same_mean, days = _same_time(x, origins, steps, day)
    with np.errstate(divide="ignore", invalid="ignore"):
        seasonal = np.stack([same_time, same_mean], axis=2) / level[:, None, None]
    count, width = len(origins), len(steps)
    rows = np.concatenate(
        [
            np.broadcast_to(scaled[:, None, :], (count, width, scaled.shape[1])),
            np.broadcast_to(zero_share[:, None, None], (count, width, 1)),
            seasonal,
            days[:, :, None],
            np.broadcast_to(steps[None, :, None].astype(np.float64), (count, width, 1)),
            np.broadcast_to(steps[None, :, None] * step_seconds, (count, width, 1)),
            np.full((count, width, 1), step_seconds),
        ],
        axis=2,
    )
    return OriginFeatures(origins, tuple(int(h) for h in steps), rows, level)


def _same_time(x: FloatArray, origins: np.ndarray, steps: np.ndarray, day: int) -> tuple[FloatArray, ...]:
    """Per (origin, horizon): the value one day before the target, the mean over up to SEASON_DAYS past days at the
    target's time of day (NaN with none yet) and how many days that was."""
    back = np.arange(1, SEASON_DAYS + 1) * day
    source = origins[:, None, None] + steps[None, :, None] - back[None, None, :]
    known = (source >= 0) & (source <= origins[:, None, None])
    picked = np.where(known, x[np.clip(source, 0, len(x) - 1)], 0.0)
    count = known.sum(axis=2).astype(np.float64)
    yesterday = np.where(known[:, :, 0], picked[:, :, 0], np.nan)
    mean = np.where(count > 0, picked.sum(axis=2) / np.maximum(count, 1), np.nan)
    return yesterday, mean, count


class _Windows:
    """Trailing-window statistics of ``x`` ending at each origin (inclusive), the window cut at the series' start."""

    def __init__(self, x: FloatArray, origins: np.ndarray) -> None:
        self.x = x
        self.origins = origins
        self._sum = np.concatenate([[0.0], np.cumsum(x)])
        self._squares = np.concatenate([[0.0], np.cumsum(x * x)])
        self._table: list[FloatArray] | None = None

    def _bounds(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        start = np.maximum(self.origins + 1 - width, 0)
        return start, self.origins + 1 - start

    def mean(self, width: int) -> FloatArray:
        start, count = self._bounds(width)
        mean: FloatArray = (self._sum[self.origins + 1] - self._sum[start]) / count
        return mean

    def std(self, width: int) -> FloatArray:
        start, count = self._bounds(width)
        mean = self.mean(width)
        square = (self._squares[self.origins + 1] - self._squares[start]) / count
        std: FloatArray = np.sqrt(np.maximum(square - mean * mean, 0.0))
        return std

    def max(self, width: int) -> FloatArray:
        """Range maxima from a sparse table: max(x[a..b]) = max(T[k][a], T[k][b − 2^k + 1]), 2^k the largest power
        of two within the range's length."""
        table = self._sparse_table()
        start, count = self._bounds(width)
        k = np.floor(np.log2(count)).astype(np.int64)
        out = np.empty(len(self.origins))
        for level in np.unique(k):
            pick = k == level
            row = table[level]
            out[pick] = np.maximum(row[start[pick]], row[self.origins[pick] - (1 << level) + 1])
        return out

    def _sparse_table(self) -> list[FloatArray]:
        if self._table is None:
            table = [self.x]
            for level in range(1, int(math.log2(max(len(self.x), 1))) + 1):
                prev, half = table[-1], 1 << (level - 1)
                table.append(np.maximum(prev[:-half], prev[half:]))
            self._table = table
        return self._table
