"""The demand prior: trees evaluated without scikit-learn as scikit-learn does, scale-free features that never read
past the origin (or more than two days back), and quantiles that are ordered, never negative, and shipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from predictor.base import History
from predictor.prior.features import FEATURES, HISTORY_SECONDS, origin_features
from predictor.prior.model import DemandPrior, from_file, shipped
from predictor.prior.train import TrainSettings, save_prior, train
from predictor.prior.trees import from_sklearn, load, save


def demand(length: int, seed: int, step: float = 60.0) -> History:
    rng = np.random.default_rng(seed)
    t = np.arange(length) * step
    rate = 20 + 10 * np.sin(2 * np.pi * t / 86_400)
    return History(rng.poisson(rate * step) / step, step)


def test_the_trees_give_what_scikit_learn_gives_missing_values_included() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 4))
    x[rng.random(x.shape) < 0.1] = np.nan
    y = np.nan_to_num(x[:, 0]) * 2 + np.isnan(x[:, 1]) + rng.normal(size=2000)
    model = HistGradientBoostingRegressor(loss="quantile", quantile=0.9, max_iter=30, max_depth=4).fit(x, y)
    query = rng.normal(size=(3000, 4))
    query[rng.random(query.shape) < 0.1] = np.nan
    np.testing.assert_allclose(from_sklearn(model).predict(query), model.predict(query), atol=1e-12)


def test_a_saved_ensemble_reads_back_the_same(tmp_path: Path) -> None:
    prior = shipped()
    save(tmp_path / "m.npz", {"q0.9": prior.models[4]}, {"levels": np.array([0.9])})
    (ensemble,), meta = load(tmp_path / "m.npz")[0].values(), load(tmp_path / "m.npz")[1]
    rows = origin_features(demand(600, 1).values, 60.0, np.arange(100, 600), (1, 5)).flat()
    np.testing.assert_allclose(ensemble.predict(rows), prior.models[4].predict(rows), rtol=1e-6)
    assert list(meta["levels"]) == [0.9]


def test_features_read_nothing_past_the_origin_nor_before_two_days() -> None:
    history = demand(4 * 1440, 2)
    origins = np.array([1000, 3000, 5000])
    every = origin_features(history.values, 60.0, origins, (1, 5, 15))
    changed = history.values.copy()
    changed[5001:] *= 7  # the future
    changed[: 5000 - int(HISTORY_SECONDS / 60)] = 0  # more than two days before the last origin
    later = origin_features(changed, 60.0, origins[-1:], (1, 5, 15))
    np.testing.assert_allclose(every.rows[-1], later.rows[0], equal_nan=True)
    np.testing.assert_allclose(every.level[-1], later.level[0])
    assert every.rows.shape == (3, 3, len(FEATURES))


def test_quantiles_are_ordered_never_negative_and_follow_the_level() -> None:
    prior = shipped()
    history = demand(3000, 3)
    q = prior.quantiles(history.values, 60.0, np.array([2999]), range(1, 16))[0]
    assert np.all(np.diff(q, axis=1) >= 0) and np.all(q >= 0)
    tenfold = prior.quantiles(history.values * 10, 60.0, np.array([2999]), range(1, 16))[0]
    np.testing.assert_allclose(tenfold, q * 10, rtol=1e-9)  # scale-free: ten times the demand, ten times the bound
    assert np.all(prior.quantiles(np.zeros(100), 60.0, np.array([99]), (1,)) == 0)  # no demand yet: 0


def test_the_shipped_prior_is_trained_on_this_codes_features(tmp_path: Path) -> None:
    prior = shipped()
    assert prior.levels[0] == 0.05 and 0.99 in prior.levels and "tune half" in prior.trained_on
    small = train([demand(1600, s) for s in range(3)], TrainSettings(rows_per_series=300, max_iter=5))
    save_prior(small, tmp_path / "p.npz")
    assert isinstance(from_file(tmp_path / "p.npz"), DemandPrior)
    with np.load(tmp_path / "p.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays["meta.features"] = np.array(["lag0"])
    np.savez(tmp_path / "other.npz", **arrays)
    with pytest.raises(ValueError, match="retrain"):
        from_file(tmp_path / "other.npz")
