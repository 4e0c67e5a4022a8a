"""One forecasting step of the server loop: every series' history in, a forecast or the reason it failed out.

Pure: histories and the horizon are passed in, nothing is read or stored here. The default model forecasts all
series of one length and step together (:func:`predictor.backends.smoothing.forecast_batch`), a thousand series in
about a second; any other registered model is fitted series by series. One failing series never stops the others.

>>> from predictor.base import History
>>> import numpy as np
>>> out = forecast_cycle({"a": History(np.arange(30.0), 60.0), "b": History(np.array([np.nan] * 5), 60.0)}, 3)
>>> out["a"].horizon, type(out["b"]).__name__
(3, 'ForecastError')
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from predictor.backends.gaps import require_observed
from predictor.backends.smoothing import MIN_OBSERVED, forecast_batch, to_forecast
from predictor.base import Forecast, ForecastError, History

DEFAULT_MODEL = "auto"

Outcome = Forecast | ForecastError


def forecast_cycle(
    histories: Mapping[str, History], horizon_steps: int, model: str = DEFAULT_MODEL
) -> dict[str, Outcome]:
    """Forecast ``horizon_steps`` steps after each history's last step; a series that cannot be forecast maps to
    its ForecastError. An unknown ``model`` or a horizon below 1 is a ValueError (a bad request, not a bad series)."""
    if horizon_steps < 1:
        raise ValueError(f"horizon_steps must be at least 1, got {horizon_steps}")
    if model == DEFAULT_MODEL:
        return _batched(histories, horizon_steps)
    from predictor.registry import FORECASTER_NAMES

    if model not in FORECASTER_NAMES:
        raise ValueError(f"unknown forecaster {model!r}; known: {', '.join(FORECASTER_NAMES)}")
    return {key: _one(history, horizon_steps, model) for key, history in histories.items()}


def _one(history: History, horizon: int, model: str) -> Outcome:
    """A third-party failure (a singular matrix in statsmodels, ...) becomes this series' ForecastError."""
    from predictor.registry import make_forecaster

    try:
        return make_forecaster(model).fit(history).predict(horizon)
    except ForecastError as exc:
        return exc
    except (ArithmeticError, ValueError, RuntimeError) as exc:  # LinAlgError is a ValueError
        return ForecastError(f"{model}: {type(exc).__name__}: {exc}")


def _batched(histories: Mapping[str, History], horizon: int) -> dict[str, Outcome]:
    """Series that can be forecast are grouped by (length, step) and forecast together, one row each."""
    out: dict[str, Outcome] = {}
    groups: dict[tuple[int, float], list[str]] = defaultdict(list)
    for key, history in histories.items():
        try:
            require_observed(history, MIN_OBSERVED, DEFAULT_MODEL)
        except ForecastError as exc:
            out[key] = exc
        else:
            groups[(len(history), history.step_seconds)].append(key)
    for (_, step_seconds), keys in groups.items():
        batch = forecast_batch(np.stack([histories[key].values for key in keys]), step_seconds, horizon)
        for row, key in enumerate(keys):
            try:
                out[key] = to_forecast(batch, row, f"{DEFAULT_MODEL} ({key})")
            except ForecastError as exc:
                out[key] = exc
    return {key: out[key] for key in histories}  # in the caller's order
