"""The chance that demand exceeds capacity within a forecast's horizon, and when it becomes likely: one judgement
that the pool card, the API and the SaturationPredicted alert all read.

Each step's forecast is read as a distribution by :mod:`predictor.distribution`: with the band alone a split normal
(the median ``yhat``, each side a normal whose 90 % half-width is that side's half of the band, so P(demand > hi) =
P(demand < lo) = 5 %); with a quantile model's levels, its own quantiles joined in standard units.

Steps are combined as a random walk's would be: the error at step k is the error at step k − 1 plus a new
independent shock, so steps i < k correlate as sqrt(i / k) (how h-step errors of a level forecast behave on the
random-walk-like demand series this serves). P(some step exceeds) is then P(any Z_k > z_k) for a standard Gaussian
random walk scaled to unit variance per step, z_k being each step's own threshold on its split normal; it is
estimated on 4,096 fixed paths (seeded: the same forecast always gives the same answer) and never reported below the
likeliest single step, which is the exact answer under perfect correlation. Two steps each at P 0.30 give about
0.39 (independent steps would give 0.51, perfectly correlated ones 0.30).

``eta_seconds`` is when the chance of having exceeded by then first reaches ``LIKELY`` (0.5): the same union, step by
step. So a saturation at least 0.5 likely always has an ETA and one under 0.5 never has: a card cannot say "not
expected" beside a 77 % risk while the alert fires on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from predictor.base import FloatArray, Forecast
from predictor.distribution import standard_thresholds

LIKELY = 0.5  # the first step at least this likely to exceed sets ``eta_seconds``
PATHS = 4_096  # Monte Carlo paths: a standard error of at most 0.008 on the union's probability
PATH_SEED = 20_240_515


@dataclass(frozen=True)
class Saturation:
    """``probability``: P(demand > capacity at some step within the horizon), 0..1; ``eta_seconds``: seconds after
    the origin to the first step by which that is at least 0.5 likely, None when it never is (probability < 0.5)."""

    probability: float
    eta_seconds: float | None
    capacity: float


def exceedance(forecast: Forecast, capacity: float) -> FloatArray:
    """P(demand > capacity) per step. Forecast 100, band [90, 120], capacity 110 → σ_hi 12.2 → 1 − Φ(0.82) = 0.21;
    a zero-width side is a certainty: yhat 100, hi 100, capacity 99 → 1.0."""
    # P(y > c) = 1 − Φ(z) = erfc(z / √2) / 2; at z = 0 (capacity == yhat) it is 0.5 either way.
    return np.array([0.5 * math.erfc(value / math.sqrt(2.0)) for value in standard_thresholds(forecast, capacity)])


@lru_cache(maxsize=8)
def _random_walk_paths(horizon: int) -> FloatArray:
    """PATHS standard Gaussian random walks of ``horizon`` steps, each step scaled to unit variance."""
    steps = np.random.default_rng(PATH_SEED).standard_normal((PATHS, horizon))
    paths: FloatArray = np.cumsum(steps, axis=1) / np.sqrt(np.arange(1, horizon + 1))
    return paths


def cumulative_probability(forecast: Forecast, capacity: float) -> FloatArray:
    """P(some step up to k exceeds ``capacity``) for each k, under random-walk-correlated steps (module docstring);
    never below the likeliest single step so far, and exact for one step."""
    per_step = exceedance(forecast, capacity)
    floor: FloatArray = np.maximum.accumulate(per_step)
    if forecast.horizon <= 1:  # nothing to combine: the exact value, not an estimate
        return floor
    crossed = _random_walk_paths(forecast.horizon) > standard_thresholds(forecast, capacity)
    by_step = np.logical_or.accumulate(crossed, axis=1).mean(axis=0)
    combined: FloatArray = np.maximum(by_step, floor)
    return combined


def union_probability(forecast: Forecast, capacity: float) -> float:
    """P(some step exceeds ``capacity``) under random-walk-correlated steps (see the module docstring)."""
    return float(cumulative_probability(forecast, capacity)[-1]) if forecast.horizon else 0.0


def saturation(forecast: Forecast, capacity: float, step_seconds: float) -> Saturation:
    """P(some step exceeds) and the first step likely to (see the module docstring); step k is k × ``step_seconds``
    after the origin. ``capacity`` must be positive and finite (ValueError otherwise)."""
    if not (math.isfinite(capacity) and capacity > 0):
        raise ValueError(f"capacity must be a positive finite number, got {capacity}")
    if not (math.isfinite(step_seconds) and step_seconds > 0):
        raise ValueError(f"step_seconds must be a positive finite number, got {step_seconds}")
    by_step = cumulative_probability(forecast, capacity)
    likely = np.flatnonzero(by_step >= LIKELY)
    eta = float((likely[0] + 1) * step_seconds) if len(likely) else None
    return Saturation(float(by_step[-1]) if len(by_step) else 0.0, eta, capacity)
