"""Rolling-origin helpers shared by the models that score themselves on their own recent past (the ensemble, the
conformal calibration) and the backtest: which origins, and fit-once-then-update forecasting through them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, Self

from predictor.base import Forecast, Forecaster, ForecastError, History


class UpdatableForecaster(Forecaster, Protocol):
    """A forecaster that can absorb new observations without re-estimating its parameters.

    ``update(history)`` receives the whole history up to the new origin (which extends the last fitted one, see
    :meth:`History.extends`) and must use nothing past it; anything else falls back to a full fit.
    """

    def update(self, history: History) -> Self: ...


def tail_origins(length: int, horizon: int, count: int) -> list[int]:
    """Up to ``count`` origins on the tail, latest first, each with a full horizon inside the history.

    Spaced by ceil(h/2) when the history allows, else by 1, never earlier than its middle: length 2,016, h 2,
    count 3 → [2013, 2012, 2011]; length 60, h 15, count 3 → [44, 43, 42].
    """
    latest = length - 1 - horizon
    earliest = length // 2
    if latest < earliest:
        return []
    stride = max(1, min(math.ceil(horizon / 2), (latest - earliest) // max(count - 1, 1)))
    return [o for o in range(latest, earliest - 1, -stride)][:count]


def absorb(forecaster: Forecaster, history: History) -> Forecaster:
    """``forecaster.update(history)`` where it has one (parameters kept), else ``forecaster.fit(history)``."""
    update: Callable[[History], Forecaster] | None = getattr(forecaster, "update", None)
    return update(history) if update is not None else forecaster.fit(history)


def rolling_forecasts(
    factory: Callable[[], Forecaster], history: History, origins: list[int], horizon: int
) -> tuple[dict[int, Forecast], Forecaster | None]:
    """``horizon``-step forecasts from each origin (ascending), each from the history up to it only: fitted at the
    first origin and updated (parameters kept) at the later ones, so 12 scored origins cost one fit, not 12.

    An origin where the model fails is skipped and the next one fits afresh. Returns the forecasts by origin and the
    model as of the last origin (None when it failed there), which the caller may carry on to a later origin.
    """
    forecasts: dict[int, Forecast] = {}
    model: Forecaster | None = None
    for origin in origins:
        known = history.upto(origin + 1)
        try:
            model = factory().fit(known) if model is None else absorb(model, known)
            forecasts[origin] = model.predict(horizon)
        except ForecastError:
            model = None
    return forecasts, model
