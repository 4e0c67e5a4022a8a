"""One series of ``bench.autoscaling``: every policy and forecaster through the simulator, the fronts, the oracles.

Per series: one replica serves the series' median demand / 20 (its mean when the median is 0), min 1 replica, the
first ``warm`` steps (a day, at most a third of the series) run but are not scored — every forecaster and policy
starts cold and is judged from the same step on. Runs, each :func:`autoscaler.simulate.simulate` with the live
controller's policy code:

- reactive (the HPA) over ``REACTIVE_TARGETS``: the front every forecasting policy is compared with;
- the oracle (exactly enough every step, reading the future) and ``foresight``: predictive fed the trace's own
  future, the same policy with a perfect forecast — what the policy and the startup cost by themselves;
- per forecaster (:mod:`bench.lib.origin_forecasts`): predictive at the default attainment target and over
  ``TARGETS`` (its front), and hybrid likewise for ``auto``;
- the rate-oracle front on the minute series derived from ServeGen (:mod:`bench.lib.rate_oracle`);
- the forecasts' own scores (:mod:`bench.lib.forecast_scores`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autoscaler.policy.settings import PolicySettings
from autoscaler.simulate import ORACLE, ForecastFn, SimulationResult, SimulationSettings, simulate, startup_steps
from bench.lib import origin_forecasts as tables
from bench.lib.corpus import CorpusSeries
from bench.lib.forecast_scores import ForecastQuality, quality, saturation_steps
from bench.lib.fronts import Point
from bench.lib.rate_oracle import rate_oracle_front
from fleet.pools import DEFAULT_SLO_ATTAINMENT
from predictor.base import Forecast, History

REPLICAS_AT_MEDIAN = 20
REACTIVE_TARGETS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
TARGETS = (0.95, 0.98, DEFAULT_SLO_ATTAINMENT, 0.995)
DEFAULT_STARTUP_S = 300.0
MARGIN_STEPS = 1
DAY_S = 86_400.0
MAIN = ("auto", "prior", "smoothing")  # forecasters swept over TARGETS; the others run at the default only


@dataclass(frozen=True)
class Spec:
    """What one series is evaluated with."""

    name: str
    history: History
    members: tuple[History, ...] = ()  # the tenants of an aggregate, for the hierarchical forecast
    corpus: CorpusSeries | None = None  # a ServeGen-derived minute series: the rate-oracle's replicates
    startups: tuple[float, ...] = (DEFAULT_STARTUP_S,)
    backends: tuple[str, ...] = ()  # heavy registered forecasters to run as well (refitted every REFIT origins)


@dataclass
class StartupRuns:
    """Every run at one startup."""

    reactive: list[Point]
    oracle: Point
    foresight: Point
    predictive: dict[str, dict[float, Point]] = field(default_factory=dict)  # forecaster → target → run
    hybrid: dict[float, Point] = field(default_factory=dict)  # auto's


@dataclass
class SeriesRuns:
    name: str
    step_seconds: float
    steps: int
    warm: int
    capacity: float
    by_startup: dict[float, StartupRuns]
    rate_oracle: list[Point] | None
    quality: dict[str, ForecastQuality]
    forecast_seconds: dict[str, float]
    auto_share_smoothing: float | None


def capacity_for(history: History) -> float:
    values = history.values[np.isfinite(history.values)]
    typical = float(np.median(values)) or float(np.mean(values)) or 1.0
    return typical / REPLICAS_AT_MEDIAN


def warm_steps(history: History) -> int:
    return min(round(DAY_S / history.step_seconds), len(history) // 3)


def score(result: SimulationResult, capacity: float, warm: int, knob: float) -> Point:
    """A run's attainment and replica-hours from step ``warm`` on."""
    steps = result.steps[warm:]
    demand = np.array([s.demand for s in steps])
    ready = np.array([s.ready for s in steps])
    scored = np.isfinite(demand)
    attainment = float(np.mean(demand[scored] <= ready[scored] * capacity + 1e-9)) if scored.any() else math.nan
    hours = sum(max(s.desired, s.ready) for s in steps) * result.step_seconds / 3600.0
    events = sum(1 for a, b in itertools.pairwise(steps) if a.desired != b.desired)
    return Point(knob, attainment, hours, events)


def horizon_for(history: History, startups: Sequence[float]) -> int:
    """Steps the tables must cover: the longest startup plus the decision interval, and 15 minutes (saturation)."""
    longest = max(startup_steps(s, history.step_seconds) for s in startups) + MARGIN_STEPS + 1
    return max(longest, saturation_steps(history.step_seconds))


def forecast_tables(spec: Spec, horizon: int, level: float, decision: int) -> dict[str, tables.OriginTable]:
    """Every forecaster's table. The hierarchical one only for pools of at most ``MAX_TENANTS`` tenants, and only as
    far ahead as the default startup's decision needs (a tenant's table costs what the pool's does: the pool of all
    of a half's 80 clients would cost 80 of them); it is not scored for saturation."""
    history = spec.history
    found = tables.naive_tables(history, horizon)
    found["prior"] = tables.prior_table(history, horizon)
    found["smoothing"] = tables.smoothing_table(history, horizon)
    found["auto"] = tables.auto_table(history, found["prior"], found["smoothing"], level, decision)
    if 1 < len(spec.members) <= MAX_TENANTS:
        found["hierarchical"] = tables.hierarchical_table(spec.members, decision + MARGIN_STEPS + 1)
    for name in spec.backends:
        found[name] = tables.fitted_table(history, horizon, name, refit_every=REFIT)
    return found


REFIT = 24
MAX_TENANTS = 20


def evaluate(spec: Spec) -> SeriesRuns:
    history = spec.history
    capacity, warm = capacity_for(history), warm_steps(history)
    horizon = horizon_for(history, spec.startups)
    decision = max(1, startup_steps(DEFAULT_STARTUP_S, history.step_seconds))
    found = forecast_tables(spec, horizon, DEFAULT_SLO_ATTAINMENT, decision)
    runs = {
        startup: _startup_runs(spec, found, capacity, warm, startup, full=startup == DEFAULT_STARTUP_S)
        for startup in spec.startups
    }
    rate = rate_oracle_front(spec.corpus, capacity, warm) if spec.corpus is not None else None
    scores = {name: quality(history, t, DEFAULT_SLO_ATTAINMENT, decision, warm) for name, t in found.items()}
    chosen = np.any(found["auto"].quantiles != found["prior"].quantiles, axis=(1, 2))[warm:]
    return SeriesRuns(
        spec.name,
        history.step_seconds,
        len(history),
        warm,
        capacity,
        runs,
        rate,
        scores,
        {name: t.seconds for name, t in found.items()},
        float(np.mean(chosen)) if len(chosen) else None,
    )


def _startup_runs(
    spec: Spec, found: Mapping[str, tables.OriginTable], capacity: float, warm: int, startup: float, *, full: bool
) -> StartupRuns:
    history = spec.history
    base = SimulationSettings(capacity_per_replica=capacity, startup_seconds=startup)

    def run(policy: str, forecast: ForecastFn | None, knob: float, settings: PolicySettings) -> Point:
        result = simulate(history, policy, replace(base, policy=settings), forecast=forecast)
        return score(result, capacity, warm, knob)

    default = base.policy
    reactive = [run("reactive", None, u, replace(default, target_utilization=u)) for u in REACTIVE_TARGETS]
    out = StartupRuns(
        reactive,
        run(ORACLE, None, math.nan, default),
        run("predictive", foresight(history), 1.0, default),
    )
    # at the default startup every forecaster; at the others, auto alone (the startup sweep)
    names = [n for n in found if full or n == "auto"]
    for name in names:
        targets = TARGETS if name in MAIN else (DEFAULT_SLO_ATTAINMENT,)
        out.predictive[name] = {
            t: run("predictive", found[name].forecast, t, replace(default, attainment_target=t)) for t in targets
        }
    out.hybrid = {
        t: run("hybrid", found["auto"].forecast, t, replace(default, attainment_target=t))
        for t in (TARGETS if full else (DEFAULT_SLO_ATTAINMENT,))
    }
    return out


def foresight(history: History) -> ForecastFn:
    """A forecast that is the trace's own future (every quantile the demand that came): not causal, like the
    oracle; predictive fed it shows what the policy and the startup cost when the forecast is perfect."""
    values = np.nan_to_num(history.values, nan=0.0)

    def future(past: History, horizon: int) -> Forecast:
        ahead = values[np.minimum(np.arange(len(past), len(past) + horizon), len(values) - 1)]
        return Forecast(ahead, ahead, ahead)

    return future
