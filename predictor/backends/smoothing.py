"""A fast forecaster that combines, per series, the closed-form smoothers with the lowest recent rolling-origin error.

Candidates: the last value, the last value plus its recent drift (a smoothed one-step change: a filling memory
keeps filling), simple exponential smoothing (SES) at a few alphas, and — when the history spans two days — each
flat one plus the daily shape ahead (the mean over past days of how the series moved from the origin's
time of day to the target's). Every candidate's forecast from every past origin is a closed form of the smoothed
levels (one ``lfilter`` pass), so the h-step errors of all candidates over the last ``SCORE_ORIGINS`` origins cost
O(n) per series, with no refitting. The candidates within 10 % of the lowest mean absolute error over those origins
and all h steps are combined with weights ∝ 1 / MAE² (the rule of :mod:`predictor.backends.ensemble`): near-ties
between, say, the last value and a fast SES are averaged rather than flipped between from one origin to the next.

Intervals are split conformal by construction: the combination's own h-step residuals on the same origins, divided by
the local volatility at their origin (a smoothed absolute one-step change) and by a per-step scale, give pooled
scores whose 5 % and 95 % conformal quantiles set the lower and upper half-widths. A calm hour gets a narrow band
and a turbulent one a wide band: residuals 10 at volatility 5 and 40 at volatility 20 are both a score of 2.

Warm-up: a series with fewer than :func:`warmup_observations` values (30, or twice the horizon when that is
longer) has only the flat candidates (the last value and SES): no trend. Below that, the drift's smoothed change (an
SES of α 0.1) still leans on its first few changes (at 30 values 95 % of its weight is on the last 29), and fewer
scored origins than the horizon leave the far steps' errors unmeasured: three rising points made the drift win and a
15-step forecast of 2.4× the last value. Replacing the warm-up by the last value with a fixed random-walk band (the
largest change so far × √k) was tried and cost 12–16 % more replica-hours on the 58-minute Azure series at the same
attainment (``python -m bench.autoscaling``); the flat candidates' own conformal band, whose half-widths are never
negative, is as wide as their errors have been.

Gaps hold the last observed value (never zero); targets that fall in a gap are not scored. Everything runs on a
2-D array (series × steps), so :mod:`predictor.cycle` forecasts a thousand series of one length in one call.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Self

import numpy as np

from predictor.backends.gaps import forward_fill, require_observed
from predictor.backends.seasonality import MIN_SEASONS, daily_period
from predictor.base import FloatArray, Forecast, ForecastError, History, NotEnoughHistory
from predictor.distribution import LEVELS, LOWER_LEVEL, UPPER_LEVEL

NAME = "smoothing"
MIN_OBSERVED = 3
ALPHAS = (1.0, 0.5, 0.3, 0.15, 0.05)  # 1.0 is the last value; 0.05 averages about the last 40 steps
MAX_DAYS = 7  # the daily shape is averaged over at most a week of past days
SCORE_ORIGINS = 240  # recent origins scored per candidate: 4 hours at 1-minute steps, 40 hours at 10-minute ones
VOLATILITY_ALPHA = 0.1  # the local volatility is an SES of |one-step change| remembering about 10 steps
DRIFT_ALPHA = 0.1  # the drift is an SES of the one-step change, remembering about 10 steps
NEAR_BEST = 1.1  # candidates within 10 % of the best recent MAE share the forecast (1 / MAE² weights)
WARMUP_MIN_OBSERVATIONS = 30  # see the module docstring, "Warm-up"
CHUNK_SERIES = 64  # series forecast together: bounds the (series × origins × steps × days) arrays to a few MB


@dataclass(frozen=True)
class Candidate:
    """SES at ``alpha`` (1.0: the last value), plus the daily shape ahead when ``seasonal``, plus k × the drift at
    step k when ``drift``."""

    alpha: float
    seasonal: bool = False
    drift: bool = False

    @property
    def name(self) -> str:
        base = "naive" if self.alpha == 1.0 else f"ses{self.alpha:g}"
        return base + ("+daily" if self.seasonal else "") + ("+drift" if self.drift else "")


@dataclass(frozen=True)
class BatchForecast:
    """Forecasts of S series for steps 1..h, (S, h) arrays, and their quantiles at ``LEVELS`` (S, h, levels);
    ``chosen`` names each series' heaviest candidate; a series whose forecast could not be computed has NaN rows."""

    yhat: FloatArray
    lo: FloatArray
    hi: FloatArray
    quantiles: FloatArray
    chosen: tuple[str, ...]


def candidates(length: int, step_seconds: float, horizon: int) -> tuple[Candidate, ...]:
    """Every SES alpha and naive+drift, the alphas doubled with the daily shape when the history holds two days and
    the horizon is within a day: 60 s steps, 2,880 rows, 15 steps → 11 candidates; 58 rows → 6."""
    season = daily_period(step_seconds)
    seasonal = (False, True) if season >= 2 and horizon <= season and length >= MIN_SEASONS * season else (False,)
    flat = tuple(Candidate(alpha, with_season) for with_season in seasonal for alpha in ALPHAS)
    if length < warmup_observations(horizon):
        return flat  # warm-up: no trend yet (module docstring)
    return (*flat, Candidate(1.0, drift=True))


def warmup_observations(horizon: int) -> int:
    """How many values a series needs before its forecast may be more than the last value (module docstring)."""
    return max(WARMUP_MIN_OBSERVATIONS, 2 * horizon)


def forecast_batch(values: FloatArray, step_seconds: float, horizon: int) -> BatchForecast:
    """Forecast each row of ``values`` (series × steps, NaN = missing; the last column is the origin)."""
    if values.ndim != 2 or horizon < 1:
        raise ValueError("values must be series × steps and the horizon at least one step")
    parts = [
        _forecast_chunk(values[start : start + CHUNK_SERIES], step_seconds, horizon)
        for start in range(0, len(values), CHUNK_SERIES)
    ]
    return BatchForecast(
        np.concatenate([p.yhat for p in parts]),
        np.concatenate([p.lo for p in parts]),
        np.concatenate([p.hi for p in parts]),
        np.concatenate([p.quantiles for p in parts]),
        tuple(name for p in parts for name in p.chosen),
    )


def _forecast_chunk(values: FloatArray, step_seconds: float, horizon: int) -> BatchForecast:
    """Score every candidate on the recent origins, combine the near-best, band the combination by its residuals."""
    n = values.shape[1]
    held = forward_fill(values)
    pool = candidates(n, step_seconds, horizon)
    season = daily_period(step_seconds) if any(c.seasonal for c in pool) else 0
    # Scored origins leave one step to score and, with a season, a day behind them for the shape.
    scored = min(SCORE_ORIGINS, n - 1 - season)
    origins = np.arange(n - 1 - scored, n)  # the last one is the forecast origin itself
    steps = np.arange(1, horizon + 1)
    target_index = origins[:-1, None] + steps[None, :]
    actual = np.where(target_index < n, values[:, np.minimum(target_index, n - 1)], np.nan)
    levels = _ses_levels(held, sorted({c.alpha for c in pool}))
    shape = _daily_shape(held, origins, steps, season) if season else None
    drift = _ses(np.diff(held, axis=1, prepend=held[:, :1]), DRIFT_ALPHA)[:, origins]
    trend = drift[:, :, None] * steps[None, None, :]
    paths = np.stack([_path(levels[c.alpha][:, origins], shape, trend, c) for c in pool])
    errors = actual[None] - paths[:, :, :-1]
    comparable = np.all(np.isfinite(errors), axis=0)  # every candidate scored on the same (origin, step) pairs
    mae = np.where(comparable[None], np.abs(errors), 0.0).sum(axis=(2, 3)) / np.maximum(comparable.sum(axis=(1, 2)), 1)
    mae = np.where(comparable.any(axis=(1, 2))[None], mae, np.inf)  # (candidates, series)
    weights = combination_weights(mae)
    yhat = np.einsum("cs,csh->sh", weights, paths[:, :, -1])
    # actual − Σ w·forecast = Σ w·(actual − forecast): the combination's own residuals, for its band
    residuals = np.einsum("cs,csoh->soh", weights, np.where(comparable[None], errors, 0.0))
    volatility = _volatility(held)[:, origins]
    offsets = _conformal_offsets(np.where(comparable, residuals, np.nan), volatility)
    # an offset on the wrong side of yhat (every residual of one sign, as in a short rising history) puts that
    # level on yhat: the band sits beside the point, never across it
    below = np.array(LEVELS) < 0.5
    offsets = np.where(below, np.minimum(offsets, 0.0), np.maximum(offsets, 0.0))
    quantiles = yhat[:, :, None] + offsets
    lo, hi = quantiles[:, :, LEVELS.index(LOWER_LEVEL)], quantiles[:, :, LEVELS.index(UPPER_LEVEL)]
    return BatchForecast(yhat, lo, hi, quantiles, tuple(pool[b].name for b in np.argmax(weights, axis=0)))


def combination_weights(mae: FloatArray) -> FloatArray:
    """Per series (columns), weights ∝ 1 / MAE² over the candidates (rows) within ``NEAR_BEST`` of the best MAE.

    MAE 10, 10.5 and 12 → the first two share (0.52, 0.48), the third is dropped; a best MAE of 0 takes all the
    weight; no finite MAE → all on the first candidate (its band will be NaN: too few scored origins).
    """
    best = np.argmin(mae, axis=0)  # ties → the first (naive)
    columns = np.arange(mae.shape[1])
    floor = np.maximum(mae[best, columns], 1e-12)[None]
    raw = np.where(mae <= NEAR_BEST * floor, 1.0 / np.maximum(mae, floor) ** 2, 0.0)
    total = raw.sum(axis=0, keepdims=True)
    first = (np.arange(mae.shape[0]) == 0)[:, None].astype(float)
    weights: FloatArray = np.where(total > 0, raw / np.where(total > 0, total, 1.0), first)
    return weights


def _ses_levels(held: FloatArray, alphas: list[float]) -> dict[float, FloatArray]:
    """SES level after each step, per alpha, started at the first observation (steps before it stay NaN)."""
    from scipy.signal import lfilter

    first = np.argmax(np.isfinite(held), axis=1)
    start = held[np.arange(len(held)), first]
    padded = np.where(np.isfinite(held), held, start[:, None])  # before the first observation: not scored anyway
    levels = {}
    for alpha in alphas:
        # level[t] = alpha × y[t] + (1 − alpha) × level[t − 1], level[−1] = y[0]
        smoothed = lfilter([alpha], [1.0, alpha - 1.0], padded, axis=1, zi=((1.0 - alpha) * start)[:, None])[0]
        levels[alpha] = np.where(np.isfinite(held), smoothed, np.nan)
    return levels


def _daily_shape(held: FloatArray, origins: np.ndarray, steps: np.ndarray, season: int) -> FloatArray:
    """Mean over past days d of held[t + k − d·season] − held[t − d·season]: how the series moved over the next k
    steps at this time of day. (series, origins, steps); days before the history are skipped."""
    days = max(1, min(MAX_DAYS, int(origins[0]) // season))
    total = np.zeros((len(held), len(origins), len(steps)))
    for day in range(1, days + 1):
        back = origins - day * season
        total += held[:, back[:, None] + steps[None, :]] - held[:, back][:, :, None]
    shape: FloatArray = total / days
    return shape


def _path(level: FloatArray, shape: FloatArray | None, trend: FloatArray, candidate: Candidate) -> FloatArray:
    """Forecasts from each origin (series, origins, steps): the level held flat, plus the candidate's extras."""
    path = np.repeat(level[:, :, None], trend.shape[2], axis=2)
    if candidate.seasonal and shape is not None:
        path = path + shape
    if candidate.drift:
        path = path + trend
    return path


def _ses(series: FloatArray, alpha: float) -> FloatArray:
    """SES of a change series along the steps, started at its mean over the history up to the origin (a first
    change of 0 would make the early volatility tiny and its scores huge); NaN counts as no change."""
    from scipy.signal import lfilter

    change = np.where(np.isfinite(series), series, 0.0)
    zi = (1.0 - alpha) * change.mean(axis=1, keepdims=True)
    smoothed: FloatArray = lfilter([alpha], [1.0, alpha - 1.0], change, axis=1, zi=zi)[0]
    return smoothed


def _volatility(held: FloatArray) -> FloatArray:
    """SES of |one-step change|, floored at 1 % of its mean so a flat stretch still has a (tiny) band."""
    change = np.abs(np.diff(held, axis=1, prepend=held[:, :1]))
    mean = np.where(np.isfinite(change), change, 0.0).mean(axis=1, keepdims=True)
    volatility: FloatArray = np.maximum(_ses(change, VOLATILITY_ALPHA), 0.01 * mean + 1e-12)
    return volatility


def _conformal_offsets(residuals: FloatArray, volatility: FloatArray) -> FloatArray:
    """Each level's offset from yhat per series and step (series, steps, ``LEVELS``; 0 at the median) from residuals
    (series, origins, steps), NaN = unscored.

    Scores are residual / (volatility at the origin × step scale); the step scale is the mean |score| per step,
    made non-decreasing (uncertainty does not shrink further ahead), and steps with no residual extend the last
    one as a random walk would (step 12 after step 3 → × 2). A level above the median is the conformal quantile of
    the scores at it, one below the median the same of the negated scores, at 1 − level.
    """
    relative = residuals / volatility[:, :-1, None]
    with warnings.catch_warnings():  # a step no origin could score yet is all NaN: _extend_steps fills it
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_abs = np.nanmean(np.abs(relative), axis=1)
    step_scale = _extend_steps(np.fmax.accumulate(mean_abs, axis=1))
    step_scale = np.maximum(step_scale, 1e-12)
    scores = (relative / step_scale[:, None, :]).reshape(len(residuals), -1)
    width = volatility[:, -1:] * step_scale  # at the forecast origin
    columns = [
        np.zeros(len(scores))
        if level == 0.5
        else (conformal_rank(scores, level) if level > 0.5 else -conformal_rank(-scores, 1.0 - level))
        for level in LEVELS
    ]
    offsets: FloatArray = np.stack(columns, axis=1)[:, None, :] * width[:, :, None]
    return offsets


def _extend_steps(scale: FloatArray) -> FloatArray:
    """Fill NaN steps (no residual that far ahead yet) from the last known step × sqrt(k / k_known)."""
    k = np.arange(1, scale.shape[1] + 1, dtype=float)
    known_k = forward_fill(np.where(np.isfinite(scale), k, np.nan))
    extended: FloatArray = forward_fill(scale) * np.sqrt(k / known_k)
    return extended


def conformal_rank(scores: FloatArray, level: float) -> FloatArray:
    """Per row, the ceil((m + 1) × level)-th smallest of its m finite scores (the max when m is small); NaN if m = 0.

    level 0.95 and m = 39 → the 38th smallest; m = 10 → the 10th (the max).
    """
    ordered = np.sort(scores, axis=1)  # NaN sorts last
    count = np.isfinite(scores).sum(axis=1)
    rank = np.minimum(np.ceil((count + 1) * level).astype(int), count)
    picked = np.take_along_axis(ordered, np.maximum(rank - 1, 0)[:, None], axis=1)[:, 0]
    return np.where(count > 0, picked, np.nan)


class Smoothing:
    """:func:`forecast_batch` for one series as a :class:`~predictor.base.Forecaster`; ``name`` says which candidate
    weighed most at the last ``predict``: "smoothing[ses0.3]", "smoothing[naive+daily]"."""

    def __init__(self) -> None:
        self.name = NAME
        self._history: History | None = None

    def fit(self, history: History) -> Self:
        require_observed(history, MIN_OBSERVED, NAME)
        self._history = history
        self.name = NAME
        return self

    def predict(self, horizon: int) -> Forecast:
        if self._history is None:
            raise ForecastError(f"{NAME}: predict called before fit")
        batch = forecast_batch(self._history.values[None, :], self._history.step_seconds, horizon)
        self.name = f"{NAME}[{batch.chosen[0]}]"
        return to_forecast(batch, 0, self.name)

    def update(self, history: History) -> Self:
        """The whole fit is one O(n) pass with no estimated state, so an update is a refit."""
        return self.fit(history)


def to_forecast(batch: BatchForecast, row: int, who: str) -> Forecast:
    """Row ``row`` as a Forecast (``lo <= yhat <= hi``); ForecastError when it could not be computed."""
    yhat, quantiles = batch.yhat[row], batch.quantiles[row]
    if not (np.all(np.isfinite(yhat)) and np.all(np.isfinite(quantiles))):
        raise NotEnoughHistory(f"{who}: too few scored origins to forecast and bound ({batch.chosen[row]})")
    return Forecast(yhat, batch.lo[row], batch.hi[row], LEVELS, quantiles)
