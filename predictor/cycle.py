"""One forecasting step of the server loop: every series' history in, a forecast or the reason it failed out.

Pure: histories and the horizon are passed in, nothing is read or stored here. The two fast models forecast all
series at once: ``smoothing`` groups the series of one length and step (:func:`predictor.backends.smoothing.
forecast_batch`), ``prior`` reads every series' last origin and evaluates its trees on all rows together
(:meth:`predictor.prior.model.DemandPrior.quantiles`); a thousand series take about a second each. Any other
registered model is fitted series by series. ``auto`` needs each pool's scores of both (:mod:`predictor.backends.
auto`), which the forecast loop keeps: :func:`forecast_candidates` gives it both candidates' forecasts, and here,
without scores, ``auto`` is the prior it starts from. One failing series never stops the others.

>>> from predictor.base import History
>>> import numpy as np
>>> out = forecast_cycle({"a": History(np.arange(30.0), 60.0), "b": History(np.array([np.nan] * 5), 60.0)}, 3)
>>> out["a"].horizon, type(out["b"]).__name__
(3, 'NotEnoughHistory')
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from predictor.backends import prior as prior_backend
from predictor.backends import smoothing
from predictor.backends.auto import CANDIDATES, PRIOR, SMOOTHING
from predictor.backends.gaps import require_observed
from predictor.base import Forecast, ForecastError, History
from predictor.prior.features import OriginFeatures, origin_features
from predictor.prior.model import shipped

DEFAULT_MODEL = "auto"

Outcome = Forecast | ForecastError


def forecast_cycle(
    histories: Mapping[str, History], horizon_steps: int, model: str = DEFAULT_MODEL
) -> dict[str, Outcome]:
    """Forecast ``horizon_steps`` steps after each history's last step; a series that cannot be forecast maps to
    its ForecastError. An unknown ``model`` or a horizon below 1 is a ValueError (a bad request, not a bad series)."""
    if horizon_steps < 1:
        raise ValueError(f"horizon_steps must be at least 1, got {horizon_steps}")
    if model in (DEFAULT_MODEL, PRIOR):
        return _batched_prior(histories, horizon_steps)
    if model == SMOOTHING:
        return _batched_smoothing(histories, horizon_steps)
    from predictor.registry import FORECASTER_NAMES

    if model not in FORECASTER_NAMES:
        raise ValueError(f"unknown forecaster {model!r}; known: {', '.join(FORECASTER_NAMES)}")
    return {key: _one(history, horizon_steps, model) for key, history in histories.items()}


def forecast_candidates(histories: Mapping[str, History], horizon_steps: int) -> dict[str, dict[str, Outcome]]:
    """Both of ``auto``'s candidates for every series: {candidate: {key: forecast or error}}."""
    return {candidate: forecast_cycle(histories, horizon_steps, candidate) for candidate in CANDIDATES}


def _one(history: History, horizon: int, model: str) -> Outcome:
    """A third-party failure (a singular matrix in statsmodels, ...) becomes this series' ForecastError."""
    from predictor.registry import make_forecaster

    try:
        return make_forecaster(model).fit(history).predict(horizon)
    except ForecastError as exc:
        return exc
    except (ArithmeticError, ValueError, RuntimeError) as exc:  # LinAlgError is a ValueError
        return ForecastError(f"{model}: {type(exc).__name__}: {exc}")


def _usable(histories: Mapping[str, History], minimum: int, who: str) -> tuple[dict[str, Outcome], list[str]]:
    """The series with too little history mapped to their error, and the keys of the others."""
    out: dict[str, Outcome] = {}
    usable = []
    for key, history in histories.items():
        try:
            require_observed(history, minimum, who)
        except ForecastError as exc:
            out[key] = exc
        else:
            usable.append(key)
    return out, usable


def _batched_smoothing(histories: Mapping[str, History], horizon: int) -> dict[str, Outcome]:
    """Series that can be forecast are grouped by (length, step) and forecast together, one row each."""
    out, usable = _usable(histories, smoothing.MIN_OBSERVED, SMOOTHING)
    groups: dict[tuple[int, float], list[str]] = defaultdict(list)
    for key in usable:
        groups[(len(histories[key]), histories[key].step_seconds)].append(key)
    for (_, step_seconds), keys in groups.items():
        batch = smoothing.forecast_batch(np.stack([histories[key].values for key in keys]), step_seconds, horizon)
        for row, key in enumerate(keys):
            try:
                out[key] = smoothing.to_forecast(batch, row, f"{SMOOTHING} ({key})")
            except ForecastError as exc:
                out[key] = exc
    return {key: out[key] for key in histories}  # in the caller's order


def _batched_prior(histories: Mapping[str, History], horizon: int) -> dict[str, Outcome]:
    """Every usable series' last origin through the prior's trees in one evaluation per level."""
    out, usable = _usable(histories, prior_backend.MIN_OBSERVED, PRIOR)
    if usable:
        prior = shipped()
        steps = range(1, horizon + 1)
        features = [
            origin_features(
                histories[key].values, histories[key].step_seconds, np.array([len(histories[key]) - 1]), steps
            )
            for key in usable
        ]
        stacked = OriginFeatures(
            np.zeros(len(usable), dtype=np.int64),
            tuple(steps),
            np.concatenate([f.rows for f in features]),
            np.concatenate([f.level for f in features]),
        )
        quantiles = prior.from_features(stacked)
        for row, key in enumerate(usable):
            out[key] = prior_backend.prior_forecast(prior, quantiles[row])
    return {key: out[key] for key in histories}
