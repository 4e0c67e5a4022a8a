"""Training the demand prior (:mod:`predictor.prior.model`) on a corpus of demand series, with scikit-learn.

From each series, ``rows_per_series`` (origin, horizon) pairs drawn at random (seeded) with the target's value
known: every series weighs the same, however long. The horizon is drawn from 1 to the steps in ``horizon_seconds``
(15 one-minute steps, 2 ten-minute ones). One ``HistGradientBoostingRegressor`` with the quantile loss per level,
shallow (``max_depth``) and few (``max_iter``) so that a thousand pools' forecasts cost well under a second in numpy;
then exported as arrays (:func:`predictor.prior.trees.from_sklearn`). ``scripts/train_demand_prior.py`` trains the
shipped one on the tune half of the project's corpus.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictor.base import FloatArray, History
from predictor.distribution import LEVELS
from predictor.prior.features import FEATURES, origin_features
from predictor.prior.model import RATIO_CAP, DemandPrior
from predictor.prior.trees import from_sklearn, save


@dataclass(frozen=True)
class TrainSettings:
    levels: tuple[float, ...] = LEVELS
    rows_per_series: int = 4_000
    horizon_seconds: float = 900.0
    max_iter: int = 100
    max_depth: int = 6
    learning_rate: float = 0.1
    min_samples_leaf: int = 100
    seed: int = 0


def dataset(series: Sequence[History], settings: TrainSettings) -> tuple[FloatArray, FloatArray]:
    """Feature rows and their targets ``y[t + h] / L[t]`` from every series (see the module docstring)."""
    rng = np.random.default_rng(settings.seed)
    rows, targets = [], []
    for history in series:
        n = len(history)
        top = max(1, math.ceil(settings.horizon_seconds / history.step_seconds - 1e-9))
        if n < 2:
            continue
        origins = rng.integers(0, n - 1, settings.rows_per_series)
        horizons = rng.integers(1, top + 1, settings.rows_per_series)
        inside = origins + horizons < n
        origins, horizons = origins[inside], horizons[inside]
        for h in np.unique(horizons):
            at = origins[horizons == h]
            features = origin_features(history.values, history.step_seconds, at, (int(h),))
            with np.errstate(divide="ignore", invalid="ignore"):
                target = history.values[at + h] / features.level
            known = np.isfinite(target) & (features.level > 0)
            rows.append(features.flat()[known])
            targets.append(target[known])
    return np.vstack(rows), np.minimum(np.concatenate(targets), RATIO_CAP)


def train(series: Sequence[History], settings: TrainSettings = TrainSettings(), trained_on: str = "") -> DemandPrior:
    """One quantile model per level on the rows of :func:`dataset`."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    rows, targets = dataset(series, settings)
    models = []
    for level in settings.levels:
        model = HistGradientBoostingRegressor(
            loss="quantile",
            quantile=level,
            max_iter=settings.max_iter,
            max_depth=settings.max_depth,
            learning_rate=settings.learning_rate,
            min_samples_leaf=settings.min_samples_leaf,
            early_stopping=False,
            random_state=settings.seed,
        )
        models.append(from_sklearn(model.fit(rows, targets)))
    return DemandPrior(settings.levels, tuple(models), trained_on)


def save_prior(prior: DemandPrior, path: Path) -> None:
    """Write ``prior`` where :func:`predictor.prior.model.from_file` reads it."""
    meta = {
        "levels": np.array(prior.levels),
        "features": np.array(FEATURES),
        "trained_on": np.array([prior.trained_on]),
    }
    save(path, {f"q{level:g}": model for level, model in zip(prior.levels, prior.models, strict=True)}, meta)
