"""Forecasts from every origin of a trace, per forecaster: what ``bench.autoscaling`` feeds the simulator.

Each forecaster sees, at origin t, the trace up to t and no further back than ``HISTORY_SECONDS`` (two days, what the
forecast loop reads of a pool), and gives its quantiles at :data:`predictor.distribution.LEVELS` for steps 1..H (a
forecaster with only a band has them read from it, :mod:`predictor.distribution`). The prior computes every origin
at once (its features never reach back past those two days, so it is the loop's own forecast at each); the others
are fitted origin by origin. ``auto`` is not fitted: at each origin it takes the prior's or the smoothing family's
forecast, whichever :class:`predictor.selection.SkillLedger` has scored better so far, exactly as the loop chooses.
NaN marks an origin a forecaster could not forecast (too little history): the policy then falls back, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.backends.auto import PRIOR, follow, ledger
from predictor.backends.smoothing import MIN_OBSERVED, forecast_batch
from predictor.base import FloatArray, Forecast, ForecastError, History
from predictor.distribution import LEVELS, LOWER_LEVEL, UPPER_LEVEL, quantile
from predictor.prior.features import HISTORY_SECONDS
from predictor.prior.model import shipped
from predictor.registry import make_forecaster
from predictor.rolling import absorb

MEDIAN = LEVELS.index(0.5)


@dataclass(frozen=True)
class OriginTable:
    """``quantiles[t, k, i]``: the forecast from origin t of step k + 1 at ``LEVELS[i]``; ``seconds`` to compute."""

    name: str
    quantiles: FloatArray
    seconds: float

    def at(self, level: float, step: int) -> FloatArray:
        """Every origin's quantile at ``level`` (one of LEVELS) for step ``step`` (1-based)."""
        return self.quantiles[:, step - 1, LEVELS.index(level)]

    def forecast(self, past: History, horizon: int) -> Forecast:
        """The forecast from the last step of ``past`` (a ForecastFn of :func:`autoscaler.simulate.simulate`)."""
        rows = self.quantiles[len(past) - 1, :horizon]
        if not np.all(np.isfinite(rows)):
            raise ForecastError(f"{self.name}: no forecast from this origin (too little history)")
        return table_forecast(rows)


def table_forecast(rows: FloatArray) -> Forecast:
    """A Forecast from (horizon, LEVELS) quantiles."""
    return Forecast(
        rows[:, MEDIAN].copy(),
        rows[:, LEVELS.index(LOWER_LEVEL)].copy(),
        rows[:, LEVELS.index(UPPER_LEVEL)].copy(),
        LEVELS,
        np.ascontiguousarray(rows),
    )


def window_steps(history: History) -> int:
    return max(1, round(HISTORY_SECONDS / history.step_seconds))


def prior_table(history: History, horizon: int) -> OriginTable:
    """The prior at every origin in one evaluation; NaN before it has ``MIN_OBSERVED`` values."""
    started = time.perf_counter()
    n = len(history)
    quantiles = shipped().quantiles(history.values, history.step_seconds, np.arange(n), range(1, horizon + 1))
    seen = np.cumsum(np.isfinite(history.values))
    quantiles[seen < MIN_OBSERVED] = np.nan
    return OriginTable("prior", quantiles, time.perf_counter() - started)


def smoothing_table(history: History, horizon: int) -> OriginTable:
    """The smoothing family at every origin, on its trailing window."""
    started = time.perf_counter()
    out = np.full((len(history), horizon, len(LEVELS)), np.nan)
    window = window_steps(history)
    for t in range(len(history)):
        values = history.values[max(0, t + 1 - window) : t + 1]
        if np.count_nonzero(np.isfinite(values)) < MIN_OBSERVED:
            continue
        out[t] = forecast_batch(values[None, :], history.step_seconds, horizon).quantiles[0]
    return OriginTable("smoothing", out, time.perf_counter() - started)


def fitted_table(history: History, horizon: int, name: str, refit_every: int = 1) -> OriginTable:
    """A registered forecaster fitted at every ``refit_every``-th origin on its trailing window and updated (its
    parameters kept) in between."""
    started = time.perf_counter()
    out = np.full((len(history), horizon, len(LEVELS)), np.nan)
    window = window_steps(history)
    model = None
    for t in range(len(history)):
        past = History(history.values[max(0, t + 1 - window) : t + 1], history.step_seconds)
        try:
            refit = t % refit_every == 0
            model = make_forecaster(name).fit(past) if model is None or refit else absorb(model, past)
            forecast = model.predict(horizon)
        except ForecastError:
            model = None
            continue
        out[t] = np.column_stack([quantile(forecast, level) for level in LEVELS])
    return OriginTable(name, out, time.perf_counter() - started)


def auto_table(
    history: History, prior: OriginTable, smoothing: OriginTable, level: float, decision_steps: int
) -> OriginTable:
    """At each origin, the candidate the ledger scores better so far (``auto``, :mod:`predictor.backends.auto`);
    ``chosen`` shares are in the name's table as the smoothing family's share of origins."""
    started = time.perf_counter()
    book = ledger(level, decision_steps, history.step_seconds)
    tables = {PRIOR: prior, "smoothing": smoothing}
    out = np.full_like(prior.quantiles, np.nan)
    step = history.step_seconds
    for t in range(len(history)):
        book.observe(t * step, float(history.values[t]))
        forecasts = {
            c: table_forecast(table.quantiles[t])
            for c, table in tables.items()
            if np.all(np.isfinite(table.quantiles[t]))
        }
        if forecasts:
            _, forecast = follow(book, forecasts, (t + decision_steps) * step)
            assert forecast.quantiles is not None
            out[t] = forecast.quantiles
    return OriginTable("auto", out, time.perf_counter() - started + prior.seconds + smoothing.seconds)


def hierarchical_table(members: Sequence[History], horizon: int) -> OriginTable:
    """Bottom-up over the pool's tenants: each tenant's prior forecast, the medians summed and each level's excess
    over the median combined as independent errors (√Σ excess²): tenants at 10 ± 3 and 20 ± 4 → 30 ± 5."""
    started = time.perf_counter()
    tables = [prior_table(member, horizon).quantiles for member in members]
    medians = sum(t[:, :, MEDIAN : MEDIAN + 1] for t in tables)
    excess = np.sqrt(sum((t - t[:, :, MEDIAN : MEDIAN + 1]) ** 2 for t in tables))
    signs = np.sign(np.array(LEVELS) - 0.5)
    out = np.maximum(medians + signs * excess, 0.0)
    return OriginTable("hierarchical", out, time.perf_counter() - started)


def naive_tables(history: History, horizon: int) -> dict[str, OriginTable]:
    """The baselines: the last value and the value a day ago, each with its own residual band."""
    return {name: fitted_table(history, horizon, name) for name in ("naive", "seasonal_naive")}
