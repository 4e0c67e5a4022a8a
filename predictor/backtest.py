"""Rolling-origin evaluation of one forecaster against the naive baselines (CONTRACT section 7).

Every origin ``t`` (a step index) from the end of the warm-up to the last ``t`` with a full horizon gets a forecast of
steps 1..h fitted on a copy of the rows up to ``t`` only, so a forecaster cannot see past its origin. The model and
both baselines are scored on the same origins and the same (origin, step) pairs.

Warm-up: ``default_warmup`` takes two days of history (what a daily-seasonal model needs to see a season twice),
capped at half the series (CONTRACT: it may not exceed half). The first origin is the last warm-up row, so the first
fit sees exactly the warm-up; the MASE scale is the mean absolute one-step naive error over those same warm-up rows
(the rows known at the first origin; Hyndman's in-sample scale).

Beyond CONTRACT section 7 the summary scores the naive forecast's own empirical interval (``baseline_intervals``)
and the saturation alarms (``saturation``): the threshold is the series' 90th percentile; the event at an origin is
an actual above it within the horizon; the naive alarm is the last observed value above it; the model's alarm is
its saturation probability (predictor.saturation with the threshold as capacity) at least 0.5.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from predictor.alarm_scores import alarm_score, average_precision, pr_curve
from predictor.base import INTERVAL_COVERAGE, FloatArray, Forecast, Forecaster, ForecastError, History
from predictor.rolling import UpdatableForecaster
from predictor.saturation import saturation

DAY_S = 86_400.0
SATURATION_PERCENTILE = 90.0
DEFAULT_WARMUP_S = 2 * DAY_S
MIN_WARMUP_STEPS = 2  # the MASE scale needs at least one one-step naive error
_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_RATIO_SLACK = 1e-9  # 900 s / 60 s is 15 steps, not 16 because of float noise

Progress = Callable[[int, int], None]


class BacktestError(ValueError):
    """The backtest cannot run as asked (horizon, warm-up or series length); the message says which."""


def parse_duration(text: str) -> float:
    """``'15m'`` → 900.0 seconds; units s, m, h, d; a bare number is seconds."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise BacktestError(f"duration {text!r} is not a positive number with a unit s, m, h or d (e.g. 15m)")
    return float(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def horizon_steps(horizon_s: float, step_s: float) -> int:
    """The horizon in steps, rounding up: 15 min at 10-min steps is 2 steps, at 1-min steps 15."""
    return max(1, math.ceil(horizon_s / step_s - _RATIO_SLACK))


def default_warmup(size: int, step_s: float) -> int:
    """Two days of steps, capped at half the series: 288 of 2,016 ten-minute steps, 30 of 60 one-minute steps."""
    return min(size // 2, max(MIN_WARMUP_STEPS, math.ceil(DEFAULT_WARMUP_S / step_s - _RATIO_SLACK)))


@dataclass(frozen=True)
class Plan:
    """Which origins to forecast from and how far: origins are step indices, the first one ends the warm-up."""

    horizon_steps: int
    warmup_steps: int
    size: int

    @property
    def origins(self) -> range:
        return range(self.warmup_steps - 1, self.size - self.horizon_steps)


def plan_backtest(size: int, step_s: float, horizon_s: float, warmup_steps: int | None = None) -> Plan:
    """Check the warm-up and horizon against the series length; raises :class:`BacktestError` naming the limit."""
    h = horizon_steps(horizon_s, step_s)
    warmup = default_warmup(size, step_s) if warmup_steps is None else warmup_steps
    if warmup > size // 2:
        raise BacktestError(f"warm-up of {warmup} steps exceeds half the series ({size} steps)")
    if warmup < MIN_WARMUP_STEPS:
        raise BacktestError(f"warm-up must be at least {MIN_WARMUP_STEPS} steps (series of {size} steps)")
    plan = Plan(h, warmup, size)
    if len(plan.origins) == 0:
        raise BacktestError(f"{size} steps leave no origin after a {warmup}-step warm-up and a {h}-step horizon")
    return plan


@dataclass(frozen=True)
class OriginForecasts:
    """Per origin (rows) and step (columns): point forecasts and the 90 % interval; NaN where a fit failed."""

    yhat: FloatArray
    lo: FloatArray
    hi: FloatArray
    failed_origins: int = 0
    refits: int = 0


def run_forecaster(
    forecaster: Forecaster,
    history: History,
    plan: Plan,
    *,
    refit_every: int = 1,
    on_progress: Progress | None = None,
) -> OriginForecasts:
    """Fit and forecast at every origin. With ``refit_every`` > 1 a forecaster that has ``update`` is refitted
    only every that many origins and updated in between; any other forecaster is refitted at every origin."""
    origins, h = plan.origins, plan.horizon_steps
    shape = (len(origins), h)
    yhat, lo, hi = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    updatable = refit_every > 1 and callable(getattr(forecaster, "update", None))
    failed = refits = 0
    for row, origin in enumerate(origins):
        known = History(history.values[: origin + 1].copy(), history.step_seconds, history.start_ts)
        try:
            if updatable and row % refit_every != 0:
                cast(UpdatableForecaster, forecaster).update(known)
            else:
                forecaster.fit(known)
                refits += 1
            forecast = forecaster.predict(h)
        except ForecastError:
            failed += 1
        else:
            _check_shape(forecast, h, forecaster.name)
            yhat[row], lo[row], hi[row] = forecast.yhat, forecast.lo, forecast.hi
        if on_progress is not None:
            on_progress(row + 1, len(origins))
    return OriginForecasts(yhat, lo, hi, failed, refits)


def _check_shape(forecast: Forecast, h: int, name: str) -> None:
    if forecast.horizon != h:
        raise BacktestError(f"forecaster {name!r} returned {forecast.horizon} steps for a horizon of {h}")


def targets(history: History, plan: Plan) -> FloatArray:
    """The actual value at origin + step, per origin (rows) and step (columns); NaN where it is missing."""
    index = np.asarray(plan.origins)[:, None] + np.arange(1, plan.horizon_steps + 1)[None, :]
    return history.values[index]


def _forward_filled(values: FloatArray) -> FloatArray:
    """Each step's last observed value at or before it (NaN before the first observation)."""
    index = np.where(np.isfinite(values), np.arange(len(values)), 0)
    np.maximum.accumulate(index, out=index)
    return values[index]  # index 0 with values[0] NaN: nothing observed yet, stays NaN


def naive_forecasts(history: History, plan: Plan) -> FloatArray:
    """The last value observed at or before each origin, for every step."""
    last = _forward_filled(history.values)[np.asarray(plan.origins)]
    return np.repeat(last[:, None], plan.horizon_steps, axis=1)


def season_steps(step_s: float, warmup_steps: int) -> int | None:
    """Steps in a day when a day is a whole number (>= 2) of steps and the warm-up holds one; else None."""
    ratio = DAY_S / step_s
    steps = round(ratio)
    if abs(ratio - steps) > _RATIO_SLACK * ratio or steps < 2 or steps > warmup_steps:
        return None
    return steps


def seasonal_naive_forecasts(history: History, plan: Plan, season: int | None) -> FloatArray:
    """The value one season before the target (the last season the origin knows); naive when there is no season."""
    if season is None:
        return naive_forecasts(history, plan)
    steps = np.arange(1, plan.horizon_steps + 1)
    back = season * np.ceil(steps / season).astype(int)  # step 1 of a daily season looks back 144 - 1 steps
    index = np.asarray(plan.origins)[:, None] + (steps - back)[None, :]
    sources: FloatArray = _forward_filled(history.values)[index]
    return sources


def naive_scale(history: History, plan: Plan) -> float:
    """Mean absolute one-step naive error over the warm-up rows (pairs where both values are present)."""
    errors = np.abs(np.diff(history.values[: plan.warmup_steps]))
    errors = errors[np.isfinite(errors)]
    return float(errors.mean()) if errors.size else math.nan


def mase(yhat: FloatArray, actual: FloatArray, scale: float) -> float:
    return float(np.mean(np.abs(actual - yhat))) / scale if scale > 0 else math.nan


def smape(yhat: FloatArray, actual: FloatArray) -> float:
    """Symmetric MAPE in percent (0..200); a pair where both are 0 counts as a perfect 0."""
    denominator = np.abs(actual) + np.abs(yhat)
    ratio = np.divide(2 * np.abs(actual - yhat), denominator, out=np.zeros_like(denominator), where=denominator > 0)
    return 100 * float(np.mean(ratio))


def coverage(lo: FloatArray, hi: FloatArray, actual: FloatArray) -> float:
    """The share of actuals inside [lo, hi], a rounding's width of slack at each edge (:func:`inside`)."""
    return float(np.mean(inside(lo, hi, actual)))


def inside(lo: FloatArray | float, hi: FloatArray | float, actual: FloatArray | float) -> Any:
    """Whether ``actual`` lies in [lo, hi], give or take 1e-9 of its size: a flat series of 5.0 forecast as
    5.000000000000001 with a zero-width band is covered, not missed (a model's arithmetic is not a miss)."""
    slack = 1e-9 * np.maximum(1.0, np.abs(actual))
    return (actual >= lo - slack) & (actual <= hi + slack)


def winkler(lo: FloatArray, hi: FloatArray, actual: FloatArray, alpha: float = 1 - INTERVAL_COVERAGE) -> float:
    """Mean interval (Winkler) score: width, plus 2/alpha times how far the actual falls outside."""
    penalty = (2 / alpha) * (np.maximum(lo - actual, 0) + np.maximum(actual - hi, 0))
    return float(np.mean(hi - lo + penalty))


@dataclass(frozen=True)
class Backtest:
    """Everything the outputs need: the plan, the model's forecasts, the baselines' and the actuals."""

    model: str
    history: History
    plan: Plan
    forecasts: OriginForecasts
    baselines: dict[str, FloatArray]
    actual: FloatArray
    season: int | None
    naive_band: OriginForecasts | None = None

    def scored(self) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """The (origin, step) pairs every forecast and the actual have: the same pairs for model and baselines."""
        mask = np.isfinite(self.actual) & np.isfinite(self.forecasts.yhat)
        for values in self.baselines.values():
            mask &= np.isfinite(values)
        return mask

    def summary(self) -> dict[str, Any]:
        """The summary.json object; a metric that cannot be computed (no scored pair, zero scale) is None."""
        mask, scale = self.scored(), naive_scale(self.history, self.plan)
        actual, fc = self.actual[mask], self.forecasts
        has_interval = mask & np.isfinite(fc.lo) & np.isfinite(fc.hi)
        return {
            "model": self.model,
            "horizon_steps": self.plan.horizon_steps,
            "origins": len(self.plan.origins),
            "mase": _metric(mase, fc.yhat[mask], actual, scale),
            "smape": _metric(smape, fc.yhat[mask], actual),
            "coverage90": _metric(coverage, fc.lo[has_interval], fc.hi[has_interval], self.actual[has_interval]),
            "baselines": {
                name: {
                    "mase": _metric(mase, values[mask], actual, scale),
                    "smape": _metric(smape, values[mask], actual),
                }
                for name, values in self.baselines.items()
            },
            "baseline_intervals": self._naive_interval_scores(mask),
            "saturation": self.saturation_summary(),
            "winkler90": _metric(winkler, fc.lo[has_interval], fc.hi[has_interval], self.actual[has_interval]),
            "mae": _metric(lambda y, a: float(np.mean(np.abs(a - y))), fc.yhat[mask], actual),
            "mase_by_step": [
                _metric(mase, fc.yhat[:, k][mask[:, k]], self.actual[:, k][mask[:, k]], scale)
                for k in range(self.plan.horizon_steps)
            ],
            "mase_scale": _finite(scale),
            "step_seconds": self.history.step_seconds,
            "warmup_steps": self.plan.warmup_steps,
            "season_steps": self.season,
            "pairs_scored": int(mask.sum()),
            "failed_origins": fc.failed_origins,
            "refits": fc.refits,
        }

    def _naive_interval_scores(self, mask: np.ndarray[Any, np.dtype[np.bool_]]) -> dict[str, dict[str, float | None]]:
        """The naive forecast's empirical 90 % interval on the model's scored pairs: the interval to beat."""
        if self.naive_band is None:
            return {}
        band = self.naive_band
        ok = mask & np.isfinite(band.lo) & np.isfinite(band.hi)
        arrays = (band.lo[ok], band.hi[ok], self.actual[ok])
        return {"naive": {"coverage90": _metric(coverage, *arrays), "winkler90": _metric(winkler, *arrays)}}

    def saturation_summary(self) -> dict[str, Any]:
        """Naive and model saturation alarms against the events, on the origins the model forecast."""
        threshold = float(np.nanpercentile(self.history.values, SATURATION_PERCENTILE))
        fc = self.forecasts
        rows = np.flatnonzero(np.all(np.isfinite(fc.yhat) & np.isfinite(fc.lo) & np.isfinite(fc.hi), axis=1))
        event = np.any(np.nan_to_num(self.actual[rows], nan=-np.inf) > threshold, axis=1)
        naive_alarm = self.baselines["naive"][rows, 0] > threshold
        probability = np.array([self._saturation_probability(int(row), threshold) for row in rows])
        return {
            "threshold": threshold,
            "origins": len(rows),
            "events": int(event.sum()),
            "naive": alarm_score(naive_alarm, event),
            "model": {
                **alarm_score(probability >= 0.5, event),
                "average_precision": average_precision(probability, event),
                "pr_curve": pr_curve(probability, event),
            },
        }

    def _saturation_probability(self, row: int, threshold: float) -> float:
        fc = self.forecasts
        if threshold <= 0:  # a series that is mostly idle: any demand above zero saturates
            return float(np.any(fc.yhat[row] > threshold))
        forecast = Forecast(fc.yhat[row], fc.lo[row], fc.hi[row])
        return saturation(forecast, threshold, self.history.step_seconds).probability


def _metric(fn: Callable[..., float], *arrays: Any) -> float | None:
    first = arrays[0]
    return _finite(fn(*arrays)) if isinstance(first, np.ndarray) and first.size else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def backtest(
    forecaster: Forecaster,
    history: History,
    plan: Plan,
    *,
    refit_every: int = 1,
    on_progress: Progress | None = None,
    model: str | None = None,
) -> Backtest:
    """Run the model and the naive and seasonal-naive baselines over the same origins; ``model`` names it in the
    summary (default: the forecaster's ``name``). The naive forecast is also run as a forecaster, for its interval."""
    from predictor.backends.naive import Naive

    model = model or forecaster.name
    season = season_steps(history.step_seconds, plan.warmup_steps)
    forecasts = run_forecaster(forecaster, history, plan, refit_every=refit_every, on_progress=on_progress)
    baselines = {
        "naive": naive_forecasts(history, plan),
        "seasonal_naive": seasonal_naive_forecasts(history, plan, season),
    }
    naive_band = run_forecaster(Naive(), history, plan)
    return Backtest(model, history, plan, forecasts, baselines, targets(history, plan), season, naive_band)
