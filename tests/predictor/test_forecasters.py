"""Every registered forecaster through one contract, then the baselines' exact values and the calibration."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Self, cast

import numpy as np
import pytest

from predictor.backends.naive import Naive, SeasonalNaive
from predictor.base import Forecast, Forecaster, ForecastError, History
from predictor.calibration import Calibrated, conformal_quantile
from predictor.registry import FORECASTER_NAMES, make_forecaster
from predictor.rolling import UpdatableForecaster

HALF_HOUR = 1_800.0  # 48 steps a day: three days are 144 steps, enough for a daily season


def daily_sine(length: int, step: float, seed: int = 1, gap_at: int | None = None) -> History:
    """A daily sine + noise with a 4-step collection gap (in the middle unless ``gap_at`` says where)."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) * step
    values = 100.0 + 30.0 * np.sin(2 * math.pi * t / 86_400.0) + rng.normal(0.0, 3.0, length)
    gap = length // 2 if gap_at is None else gap_at
    values[gap : gap + 4] = np.nan
    return History(values, step, start_ts=1_700_000_000.0)


SERIES = {
    "daily": (daily_sine(160, HALF_HOUR), 150, 6),  # fit on 150 steps (> 2 days), forecast 6
    "short": (daily_sine(48, 60.0), 40, 4),  # 40 one-minute steps: no season, tiny training sets
    "ends_in_gap": (daily_sine(48, 60.0, gap_at=36), 40, 4),  # steps 36..39 missing: an agent away at the origin
}
CASES = [(name, False) for name in FORECASTER_NAMES] + [("naive", True), ("ets", True)]


def assert_same(a: Forecast, b: Forecast) -> None:
    for left, right in ((a.yhat, b.yhat), (a.lo, b.lo), (a.hi, b.hi)):
        np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("series", sorted(SERIES))
@pytest.mark.parametrize(("name", "calibrated"), CASES)
def test_forecaster_contract(name: str, calibrated: bool, series: str) -> None:
    full, n, horizon = SERIES[series]
    altered = History(full.values.copy(), full.step_seconds, full.start_ts)
    altered.values[n:] += 1_000.0  # the future differs wildly; a forecast from origin n − 1 must not notice

    reused = make_forecaster(name, seed=3, quick=True, calibrated=calibrated)
    reused.fit(full).predict(horizon)  # state from a longer history must not survive a refit
    first = reused.fit(full.upto(n)).predict(horizon)
    second = make_forecaster(name, seed=3, quick=True, calibrated=calibrated).fit(altered.upto(n)).predict(horizon)

    assert first.horizon == horizon
    assert all(np.all(np.isfinite(a)) for a in (first.yhat, first.lo, first.hi))
    assert np.all(first.lo <= first.yhat) and np.all(first.yhat <= first.hi)
    assert_same(first, second)  # same seed, same past → same forecast, whatever came after
    assert isinstance(reused.name, str) and reused.name


FROM_ONE_VALUE = {"prior", "auto"}  # the prior knows how demand moves: one observed minute is enough to forecast


@pytest.mark.parametrize("name", FORECASTER_NAMES)
@pytest.mark.parametrize("values", [[5.0], [np.nan, 5.0, np.nan], [np.nan] * 10])
def test_too_little_history_is_a_clear_error(name: str, values: list[float]) -> None:
    history = History(np.array(values), 60.0)
    if name in FROM_ONE_VALUE and np.isfinite(values).any():
        forecast = make_forecaster(name, quick=True).fit(history).predict(3)
        assert np.all(np.isfinite(forecast.yhat)) and np.all(forecast.yhat >= 0)
        return
    with pytest.raises(ForecastError, match=r"at least \d+ observed values?|every value .* missing"):
        make_forecaster(name, quick=True).fit(history).predict(3)


def test_naive_holds_the_last_observed_value_with_residual_quantiles() -> None:
    # A ramp 0..9 then a gap: every k-step residual is exactly k, so the band is [yhat, yhat + k].
    history = History(np.array([*range(10), np.nan]), 60.0)
    forecast = Naive().fit(history).predict(3)
    np.testing.assert_array_equal(forecast.yhat, [9.0, 9.0, 9.0])
    np.testing.assert_array_equal(forecast.lo, [9.0, 9.0, 9.0])
    np.testing.assert_allclose(forecast.hi, [10.0, 11.0, 12.0])


def test_seasonal_naive_repeats_the_value_one_day_ago() -> None:
    # Hourly steps: 24 a day; three days of a distinct value per step.
    values = np.arange(72, dtype=np.float64) ** 1.5
    model = SeasonalNaive().fit(History(values, 3_600.0))
    forecast = model.predict(30)
    assert model.season == 24 and model.name == "seasonal_naive[24]"
    expected = [values[71 + k - 24 * math.ceil(k / 24)] for k in range(1, 31)]
    np.testing.assert_array_equal(forecast.yhat, expected)


def test_seasonal_naive_without_two_days_falls_back_to_naive() -> None:
    history = History(np.arange(30, dtype=np.float64), 3_600.0)  # 30 hours < 2 days
    model = SeasonalNaive().fit(history)
    assert model.season is None and "naive" in model.name.split("→")[-1]
    assert_same(model.predict(4), Naive().fit(history).predict(4))


class NarrowMean:
    """The history's mean with a deliberately far too narrow ±0.1 band."""

    name = "narrow_mean"

    def __init__(self) -> None:
        self.mean = math.nan

    def fit(self, history: History) -> Self:
        self.mean = float(np.nanmean(history.values))
        return self

    def predict(self, horizon: int) -> Forecast:
        yhat = np.full(horizon, self.mean)
        return Forecast(yhat, yhat - 0.1, yhat + 0.1)


def coverage(factory: type[NarrowMean] | None, values: np.ndarray, horizon: int) -> float:
    hits: list[bool] = []
    for origin in range(300, len(values) - horizon, 3):
        history = History(values[: origin + 1], 60.0)
        model: Forecaster = Calibrated(NarrowMean) if factory is None else NarrowMean()
        forecast = model.fit(history).predict(horizon)
        actual = values[origin + 1 : origin + 1 + horizon]
        hits.extend(((forecast.lo <= actual) & (actual <= forecast.hi)).tolist())
    return float(np.mean(hits))


def test_calibration_brings_a_too_narrow_interval_to_about_90_percent() -> None:
    values = np.random.default_rng(7).normal(10.0, 1.0, 900)
    assert coverage(NarrowMean, values, 5) < 0.2
    assert 0.8 <= coverage(None, values, 5) <= 0.97


def test_calibration_without_enough_tail_keeps_the_model_interval_and_says_so() -> None:
    model = Calibrated(NarrowMean).fit(History(np.arange(6, dtype=np.float64), 60.0))
    forecast = model.predict(4)
    assert not model.calibrated
    np.testing.assert_allclose(forecast.hi - forecast.yhat, 0.1)


def test_conformal_quantile_is_the_finite_sample_rank() -> None:
    scores = np.arange(1.0, 40.0)  # 39 scores: rank ceil(40 × 0.95) = 38
    assert conformal_quantile(scores) == 38.0
    assert conformal_quantile(np.array([3.0, 1.0, 2.0])) == 3.0


UPDATABLE = [("ets", False), ("sarimax", False), ("gbm", False), ("lstm", False), ("ensemble", False), ("ets", True)]
NEW_STEPS = 4


def updatable(name: str, calibrated: bool) -> UpdatableForecaster:
    """A fresh quick forecaster that has ``update``."""
    model = make_forecaster(name, seed=3, quick=True, calibrated=calibrated)
    assert callable(getattr(model, "update", None))
    return cast(UpdatableForecaster, model)


@pytest.mark.parametrize("series", sorted(SERIES))
@pytest.mark.parametrize(("name", "calibrated"), UPDATABLE)
def test_update_absorbs_new_steps_and_nothing_past_them(name: str, calibrated: bool, series: str) -> None:
    full, n, horizon = SERIES[series]
    seen = n + NEW_STEPS
    altered = History(full.values.copy(), full.step_seconds, full.start_ts)
    altered.values[seen:] += 1_000.0  # past the new origin: must not matter
    moved = History(full.values.copy(), full.step_seconds, full.start_ts)
    moved.values[n:seen] += 50.0  # the new steps themselves: must matter

    updated = updatable(name, calibrated).fit(full.upto(n)).update(full.upto(seen)).predict(horizon)
    again = updatable(name, calibrated).fit(altered.upto(n)).update(altered.upto(seen)).predict(horizon)
    shifted = updatable(name, calibrated).fit(moved.upto(n)).update(moved.upto(seen)).predict(horizon)

    assert updated.horizon == horizon
    assert all(np.all(np.isfinite(a)) for a in (updated.yhat, updated.lo, updated.hi))
    assert np.all(updated.lo <= updated.yhat) and np.all(updated.yhat <= updated.hi)
    assert_same(updated, again)
    assert not np.allclose(updated.yhat, shifted.yhat)


@pytest.mark.parametrize("series", ["daily", "ends_in_gap"])
@pytest.mark.parametrize(("name", "calibrated"), UPDATABLE)
def test_update_keeps_the_fitted_parameters_exactly(name: str, calibrated: bool, series: str) -> None:
    # Parameters come from the fit alone: an update with nothing new is the fit itself, and updating in two hops
    # lands where one hop does (ETS and SARIMAX re-run their filter from the window's start; the trees, the LSTM
    # weights, the ensemble's weights and the conformal scales are the fit's).
    full, n, horizon = SERIES[series]
    fitted = updatable(name, calibrated).fit(full.upto(n)).predict(horizon)
    assert_same(updatable(name, calibrated).fit(full.upto(n)).update(full.upto(n)).predict(horizon), fitted)

    model = updatable(name, calibrated).fit(full.upto(n))
    model.predict(horizon)  # trains or scores on the fitted history, as the backtest does before updating
    two_hops = model.update(full.upto(n + 1)).update(full.upto(n + NEW_STEPS)).predict(horizon)
    one_hop = updatable(name, calibrated).fit(full.upto(n)).update(full.upto(n + NEW_STEPS)).predict(horizon)
    assert_same(two_hops, one_hop)


def revised(history: History) -> History:
    values = history.values.copy()
    values[len(values) // 3] += 25.0  # a late correction of an old rollup
    return History(values, history.step_seconds, history.start_ts)


NOT_EXTENDING: dict[str, Callable[[History], History]] = {  # from the history fitted on
    "shorter": lambda fitted: fitted.upto(len(fitted) - 3),
    "later_start": lambda fitted: History(fitted.values, fitted.step_seconds, fitted.start_ts + fitted.step_seconds),
    "other_step": lambda fitted: History(fitted.values, 2 * fitted.step_seconds, fitted.start_ts),
    "revised_past": revised,
}


@pytest.mark.parametrize("case", sorted(NOT_EXTENDING))
@pytest.mark.parametrize(("name", "calibrated"), UPDATABLE)
def test_update_on_a_history_that_does_not_extend_the_fitted_one_is_a_fit(
    name: str, calibrated: bool, case: str
) -> None:
    full, n, horizon = SERIES["daily"]
    target = NOT_EXTENDING[case](full.upto(n))
    model = updatable(name, calibrated).fit(full.upto(n))
    model.predict(horizon)
    assert_same(model.update(target).predict(horizon), updatable(name, calibrated).fit(target).predict(horizon))
