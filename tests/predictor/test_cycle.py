"""The forecasting step of the loop: every series forecast at once, a failing one isolated, no look-ahead."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.backends.prior import PriorForecaster
from predictor.backends.smoothing import (
    Smoothing,
    candidates,
    combination_weights,
    forecast_batch,
    warmup_observations,
)
from predictor.base import Forecast, ForecastError, History
from predictor.cycle import DEFAULT_MODEL, forecast_cycle


def noisy(length: int, seed: int, step: float = 60.0, level: float = 100.0) -> History:
    rng = np.random.default_rng(seed)
    t = np.arange(length) * step
    values = level + 20 * np.sin(2 * math.pi * t / 86_400) + rng.normal(0, 5, length)
    return History(values, step, start_ts=0.0)


def test_the_default_model_is_auto() -> None:
    assert DEFAULT_MODEL == "auto"


def test_a_failing_series_gets_its_error_and_the_others_their_forecast() -> None:
    histories = {
        "ok": noisy(120, 1),
        "empty": History(np.full(50, np.nan), 60.0),
        "other_length": noisy(90, 2, step=600.0),
        "ok2": noisy(120, 3),
    }
    out = forecast_cycle(histories, 5)
    assert list(out) == list(histories)  # the caller's order
    assert isinstance(out["empty"], ForecastError) and "observed" in str(out["empty"])
    for key in ("ok", "other_length", "ok2"):
        forecast = out[key]
        assert isinstance(forecast, Forecast) and forecast.horizon == 5
        assert np.all(forecast.lo <= forecast.yhat) and np.all(forecast.yhat <= forecast.hi)


def test_a_batch_forecast_equals_each_series_forecast_alone() -> None:
    histories = {f"s{i}": noisy(3000, i) for i in range(5)}
    histories["s1"].values[2990:] = np.nan  # one ends in a gap
    for model, forecaster in (("smoothing", Smoothing), ("prior", PriorForecaster)):
        together = forecast_cycle(histories, 15, model)
        for key, history in histories.items():
            alone = forecaster().fit(history).predict(15)
            forecast = together[key]
            assert isinstance(forecast, Forecast) and forecast.quantiles is not None and alone.quantiles is not None
            np.testing.assert_allclose(forecast.yhat, alone.yhat)
            np.testing.assert_allclose(forecast.hi, alone.hi)
            np.testing.assert_allclose(forecast.quantiles, alone.quantiles)


def test_the_forecast_never_reads_past_the_origin() -> None:
    history = noisy(400, 4)
    changed = history.values.copy()
    changed[300:] *= 10
    first = forecast_batch(history.values[None, :300], 60.0, 10)
    second = forecast_batch(changed[None, :300], 60.0, 10)
    np.testing.assert_array_equal(first.yhat, second.yhat)
    np.testing.assert_array_equal(first.hi, second.hi)


def test_a_gap_at_the_origin_holds_the_last_value_never_zero() -> None:
    values = np.full(60, 40.0)
    values[-10:] = np.nan
    forecast = forecast_cycle({"away": History(values, 60.0)}, 3, "smoothing")["away"]
    assert isinstance(forecast, Forecast)
    np.testing.assert_allclose(forecast.yhat, 40.0)
    prior = forecast_cycle({"away": History(values, 60.0)}, 3)["away"]  # the default, the prior: near 40, not 0
    assert isinstance(prior, Forecast) and np.all(np.abs(prior.yhat - 40.0) < 4.0)


def test_a_ramp_is_extrapolated_by_the_drift_candidate() -> None:
    ramp = History(np.arange(200.0) * 2.0, 60.0)
    model = Smoothing().fit(ramp)
    forecast = model.predict(4)
    assert model.name == "smoothing[naive+drift]"
    np.testing.assert_allclose(forecast.yhat, [400.0, 402.0, 404.0, 406.0], rtol=1e-3)


def test_near_best_candidates_share_the_forecast_by_inverse_squared_error() -> None:
    mae = np.array([[10.0, np.inf], [10.5, np.inf], [12.0, np.inf]])  # second series: nothing scored
    weights = combination_weights(mae)
    np.testing.assert_allclose(weights[:, 0], [0.01 / (0.01 + 1 / 110.25), 1 / 110.25 / (0.01 + 1 / 110.25), 0.0])
    np.testing.assert_array_equal(weights[:, 1], [1.0, 0.0, 0.0])


def test_the_daily_shape_joins_the_candidates_with_two_days_of_history() -> None:
    assert not any(c.seasonal for c in candidates(2879, 60.0, 15))
    assert sum(c.seasonal for c in candidates(2880, 60.0, 15)) == len([c for c in candidates(2880, 60.0, 15)]) // 2


def test_the_interval_covers_about_90_percent_of_iid_noise() -> None:
    values = np.random.default_rng(11).normal(50.0, 5.0, 1400)
    hits = []
    for origin in range(600, 1380, 13):
        forecast = Smoothing().fit(History(values[: origin + 1], 60.0)).predict(5)
        actual = values[origin + 1 : origin + 6]
        hits.extend(((forecast.lo <= actual) & (actual <= forecast.hi)).tolist())
    assert 0.82 <= float(np.mean(hits)) <= 0.97


def test_an_unknown_model_or_horizon_is_a_bad_request() -> None:
    with pytest.raises(ValueError, match="unknown forecaster"):
        forecast_cycle({"a": noisy(50, 1)}, 3, model="oracle")
    with pytest.raises(ValueError, match="horizon"):
        forecast_cycle({"a": noisy(50, 1)}, 0)


def test_another_registered_model_runs_series_by_series() -> None:
    out = forecast_cycle({"a": noisy(50, 1), "b": History(np.array([1.0]), 60.0)}, 3, model="naive")
    assert isinstance(out["a"], Forecast) and isinstance(out["b"], ForecastError)


@pytest.mark.parametrize(
    "values",
    [[10.0, 12.0, 14.0], [100.0, 130.0, 125.0, 160.0, 150.0, 170.0], [float(v) for v in range(29)]],
)
def test_a_short_history_gets_no_trend_and_a_band_around_its_forecast(values: list[float]) -> None:
    """Three rising points once made the drift win: 34 at step 15 of 10, 12, 14, with a band lying above it."""
    batch = forecast_batch(np.array([values]), 60.0, 15)
    assert "drift" not in batch.chosen[0]
    assert max(batch.yhat[0]) <= max(values)  # flat candidates: never past the highest value seen
    assert all(batch.lo[0] <= batch.yhat[0]) and all(batch.yhat[0] <= batch.hi[0])


def test_the_warm_up_ends_at_thirty_values_or_twice_the_horizon() -> None:
    assert warmup_observations(15) == 30 and warmup_observations(60) == 120
    assert not any(c.drift for c in candidates(29, 60.0, 15))
    assert any(c.drift for c in candidates(30, 60.0, 15))
    rising = np.arange(40, dtype=float)[None, :]
    assert forecast_batch(rising, 60.0, 15).yhat[0][-1] > 45  # a trend is trusted now: 39 + 15 steps of +1
