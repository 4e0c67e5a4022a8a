"""A forecast step as a distribution: the band read as a split normal, a quantile model's own levels, and where a
capacity sits."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.base import Forecast
from predictor.distribution import quantile, standard_thresholds


def band() -> Forecast:
    return Forecast(np.array([100.0, 100.0]), np.array([90.0, 90.0]), np.array([120.0, 120.0]))


def test_the_band_alone_is_a_split_normal() -> None:
    np.testing.assert_allclose(quantile(band(), 0.99), 100 + 20 * 2.3263 / 1.6449, atol=0.01)
    np.testing.assert_allclose(quantile(band(), 0.95), 120.0)
    np.testing.assert_allclose(quantile(band(), 0.05), 90.0)


def test_a_quantile_models_own_tail_wins() -> None:
    levels = (0.05, 0.5, 0.95, 0.99)
    grid = np.array([[90.0, 100.0, 120.0, 150.0], [90.0, 100.0, 120.0, 150.0]])
    own = Forecast(np.array([100.0, 100.0]), np.array([90.0, 90.0]), np.array([120.0, 120.0]), levels, grid)
    np.testing.assert_allclose(quantile(own, 0.99), 150.0)
    assert float(quantile(own, 0.995)[0]) > 150.0  # past the last level: along the last segment
    assert standard_thresholds(own, 150.0)[0] == pytest.approx(2.3263, abs=1e-3)


def test_a_flat_distribution_is_a_certainty_either_side_and_even_odds_on_it() -> None:
    flat = Forecast(np.array([100.0]), np.array([100.0]), np.array([100.0]))
    assert standard_thresholds(flat, 99.0)[0] == -np.inf
    assert standard_thresholds(flat, 101.0)[0] == np.inf
    assert standard_thresholds(flat, 100.0)[0] == pytest.approx(0.0, abs=1e-12)


def test_levels_and_quantiles_come_together() -> None:
    with pytest.raises(ValueError, match="together"):
        Forecast(np.array([1.0]), np.array([0.0]), np.array([2.0]), (0.9,), None)
