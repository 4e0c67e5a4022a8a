"""The predictive bound's band scale: how many of the forecast's own excess of its target quantile over yhat a pool
is provisioned for. It starts at 1 (``INITIAL_BAND_SCALE``: the forecaster's quantile at the attainment target, as
it is) and follows the attainment reached (:func:`adapted_band_scale`), so a forecaster that is wide or narrow for
this pool, or the rails' own extra headroom, is made good. The controller and the simulator carry it from one
decision to the next."""

from __future__ import annotations

import math

from autoscaler.policy.settings import PolicySettings

INITIAL_BAND_SCALE = 1.0
MIN_BAND_SCALE = 1e-3  # a scale that has shrunk to nothing can still grow again


def adapted_band_scale(scale: float, missed: bool, settings: PolicySettings, elapsed_seconds: float) -> float:
    """The band scale after one decision interval, by quantile tracking on its logarithm (Angelopoulos, Candès and
    Tibshirani, "Conformal PID control", 2023; adaptive conformal inference on the bound itself rather than on its
    level): × exp(η (1 − α)) when the demand outran the ready replicas' capacity, × exp(−η α) otherwise, α = 1 −
    ``attainment_target``, η = ``quantile_rate`` per minute of the interval. Misses then come at rate α in the long
    run whatever the forecast's calibration, utilization or lag: each miss takes what 1/α − 1 hits give back; on the
    logarithm, a band ten times too narrow is made good in about a hundred misses, whatever its width. Target 0.999,
    η 0.02, one minute: a miss widens the bound's excess over yhat by 2.0 %, a hit narrows it by 0.002 %."""
    target = settings.attainment_target
    if target is None:
        return scale
    eta = settings.quantile_rate * elapsed_seconds / 60.0
    alpha = 1 - target
    return max(scale, MIN_BAND_SCALE) * math.exp(eta * ((1.0 if missed else 0.0) - alpha))
