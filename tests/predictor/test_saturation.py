"""Saturation from a forecast's band: per-step split-normal exceedance, combined by the maximum, and its ETA."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.base import Forecast
from predictor.saturation import Saturation, exceedance, saturation


def band(yhat: list[float], lo: list[float], hi: list[float]) -> Forecast:
    return Forecast(np.array(yhat), np.array(lo), np.array(hi))


def test_a_lower_bound_above_capacity_is_near_certain_saturation_from_the_first_step() -> None:
    result = saturation(band([120, 130], [110, 115], [130, 145]), capacity=100.0, step_seconds=60.0)
    assert result.probability > 0.99  # P(y < lo) is 5 %, and 100 is further below lo than that
    assert (result.eta_seconds, result.capacity) == (60.0, 100.0)
    assert isinstance(result, Saturation)


def test_an_upper_bound_below_capacity_is_near_zero_and_has_no_eta() -> None:
    result = saturation(band([50, 55, 60], [40, 42, 44], [70, 75, 80]), capacity=100.0, step_seconds=600.0)
    assert result.probability < 0.05 and result.eta_seconds is None


def test_the_eta_is_the_first_step_whose_median_reaches_capacity() -> None:
    rising = band([80, 90, 100, 110], [70, 80, 90, 100], [90, 100, 110, 120])
    result = saturation(rising, capacity=100.0, step_seconds=60.0)
    assert result.eta_seconds == 180.0  # step 3 sits on capacity: P = 0.5
    assert result.probability >= exceedance(rising, 100.0).max()


def test_the_band_edges_are_the_5_and_95_percent_points_of_an_asymmetric_split_normal() -> None:
    skewed = band([100, 100], [95, 95], [140, 140])
    np.testing.assert_allclose(exceedance(skewed, 140.0), [0.05, 0.05], atol=1e-6)
    np.testing.assert_allclose(exceedance(skewed, 95.0), [0.95, 0.95], atol=1e-6)
    # 120 is half-way up the wide upper side: z = 1.645 / 2 → 1 − Φ(0.822) ≈ 0.206
    assert exceedance(skewed, 120.0)[0] == pytest.approx(0.5 * math.erfc(0.8224268 / math.sqrt(2)), abs=1e-6)


def test_steps_combine_between_perfect_correlation_and_independence() -> None:
    flat = band([90] * 15, [80] * 15, [100] * 15)  # each step P = 0.05 of exceeding 100
    probability = saturation(flat, 100.0, 60.0).probability
    assert 0.05 < probability < 1 - 0.95**15  # more than one step's 0.05, less than 15 independent tries' 0.54
    assert saturation(flat, 100.0, 60.0) == saturation(flat, 100.0, 60.0)  # fixed paths: reproducible


def test_one_step_is_its_exact_exceedance() -> None:
    single = band([90], [80], [100])
    assert saturation(single, 100.0, 60.0).probability == pytest.approx(0.05, abs=1e-6)


def test_two_equally_likely_steps_follow_the_random_walk_union() -> None:
    # Each step P 0.30 (capacity 0.5244 σ above yhat); correlation sqrt(1/2) → P(either) ≈ 0.41.
    two = band([90, 90], [80, 80], [100, 100])
    capacity = 90 + 10 / 1.6448536 * 0.5244005
    np.testing.assert_allclose(exceedance(two, capacity), [0.3, 0.3], atol=1e-4)
    assert saturation(two, capacity, 60.0).probability == pytest.approx(0.41, abs=0.02)


def test_a_zero_width_band_is_a_certainty_either_way() -> None:
    assert saturation(band([101], [101], [101]), 100.0, 60.0).probability == 1.0
    assert saturation(band([99], [99], [99]), 100.0, 60.0).probability == 0.0


@pytest.mark.parametrize("capacity", [0.0, -5.0, math.nan, math.inf])
def test_a_capacity_that_is_not_positive_and_finite_is_refused(capacity: float) -> None:
    with pytest.raises(ValueError, match="capacity"):
        saturation(band([1], [0], [2]), capacity, 60.0)


def test_a_likely_saturation_always_has_an_eta_and_an_unlikely_one_never_has() -> None:
    # fifteen steps each 0.30 likely: no single step reaches 0.5, together they do, by some step
    flat = band([90] * 15, [80] * 15, [100] * 15)
    capacity = 90 + 10 / 1.6448536 * 0.5244005
    result = saturation(flat, capacity, 60.0)
    assert exceedance(flat, capacity).max() < 0.5 <= result.probability
    assert result.eta_seconds is not None and 60.0 < result.eta_seconds <= 900.0
    rng = np.random.default_rng(3)
    for _ in range(200):
        yhat = rng.uniform(50, 150, 10)
        width = rng.uniform(1, 40, 10)
        judged = saturation(band(list(yhat), list(yhat - width), list(yhat + width)), 100.0, 60.0)
        assert (judged.probability >= 0.5) == (judged.eta_seconds is not None)
