"""The demand prior: quantiles of a pool's demand ``h`` steps ahead, read from its own recent history by one model
learned across many series (:mod:`predictor.prior.train`) and shipped with the project (``demand_prior.npz``).

One gradient-boosted quantile model per level (``levels``, 0.05 to 0.995) predicts ``y[t + h] / L[t]`` from the
scale-free features of :mod:`predictor.prior.features`; the quantiles are those ratios times the origin's level
``L``, sorted across levels (models fitted apart can cross) and never below zero (a request rate is never negative).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictor.base import FloatArray
from predictor.prior.features import FEATURES, OriginFeatures, origin_features
from predictor.prior.trees import TreeEnsemble, load

SHIPPED = Path(__file__).resolve().parent / "demand_prior.npz"
RATIO_CAP = 1_000.0  # a target past 1,000× the level is a burst from idle: learnt and forecast as 1,000×, not 10⁶×


@dataclass(frozen=True)
class DemandPrior:
    """The quantile models by level (ascending); ``trained_on`` says what (from the file's metadata)."""

    levels: tuple[float, ...]
    models: tuple[TreeEnsemble, ...]
    trained_on: str = ""

    def quantiles(
        self,
        values: FloatArray,
        step_seconds: float,
        origins: np.ndarray,
        horizons: Sequence[int],
        levels: Sequence[float] | None = None,
    ) -> FloatArray:
        """(origins, horizons, levels) quantiles of the demand ``h`` steps after each origin, for ``levels`` (a
        subset of the model's; all by default), from ``values`` up to each origin only."""
        return self.from_features(origin_features(values, step_seconds, origins, horizons), levels)

    def from_features(self, features: OriginFeatures, levels: Sequence[float] | None = None) -> FloatArray:
        """:meth:`quantiles` from features already computed (the forecast loop stacks every pool's last origin)."""
        wanted = self.levels if levels is None else tuple(levels)
        missing = set(wanted) - set(self.levels)
        if missing:
            raise ValueError(f"the prior has no model for levels {sorted(missing)}; it has {list(self.levels)}")
        rows = features.flat()
        ratios = np.column_stack([self.models[self.levels.index(level)].predict(rows) for level in wanted])
        shape = (len(features.origins), len(features.horizons), len(wanted))
        ratios = np.clip(ratios, 0.0, RATIO_CAP)
        quantiles = np.sort(ratios.reshape(shape), axis=2) * features.level[:, None, None]
        clipped: FloatArray = np.maximum(quantiles, 0.0)
        return clipped


def from_file(path: Path) -> DemandPrior:
    """A prior saved by :func:`predictor.prior.train.save`; ValueError when its features are not this code's."""
    ensembles, meta = load(path)
    features = tuple(str(name) for name in meta["features"])
    if features != FEATURES:
        raise ValueError(f"{path}: trained on features {features}, this code computes {FEATURES}; retrain it")
    levels = tuple(float(level) for level in meta["levels"])
    models = tuple(ensembles[f"q{level:g}"] for level in levels)
    return DemandPrior(levels, models, str(meta["trained_on"][0]) if "trained_on" in meta else "")


@functools.cache
def shipped() -> DemandPrior:
    """The prior shipped with the project, read once per process."""
    return from_file(SHIPPED)
