"""Autoscaling benchmark (CONTRACT section 12): ``python -m bench.autoscaling [--quick] [SERIES_DIR]``.

Every demand series of the trace directory (default: the repository's copy of the trace set, ``data/traces/series``)
goes through :func:`autoscaler.simulate.simulate` with static-peak, reactive, predictive,
hybrid and the oracle, plus predictive fed the trace's own future (a perfect forecast: what the policy and the startup
cost by themselves). Per series, one replica serves the series' median demand / 20 (so the median needs 20 replicas
and the peaks tens more) and a replica starts in one step. Each policy's headroom knob is swept — reactive's target
utilization, predictive's and hybrid's attainment target (the level their adapted bound aims at) — giving a front of
SLO attainment against replica-hours (``--plot FILE`` draws them as SVG). The baseline is the reactive HPA: at each
default point of predictive and hybrid, the replica-hours reactive's front needs for that same attainment; ``ratio``
is the better of the two's default replica-hours over that, where it reaches at least reactive-70 %'s attainment,
geometric mean over series. Scale events are counted, and flaps: scale-downs undone at the next decision. The
forecaster is ``auto``, refitted at every step on the rows up to that step only (its fit is one O(n) pass, 1–3 ms),
cached across the sweep since a forecast does not depend on the policy. With the default trace directory, the two
ServeGen series are also run minute-level (``bench.lib.minute_series``: two days derived from their 10-minute counts)
with cold starts of 2, 5 and 10 minutes. Progress and the tables go to stderr; the last stdout line is JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoscaler.policy.settings import PolicySettings
from autoscaler.simulate import ORACLE, SimulationResult, SimulationSettings, simulate, startup_steps
from bench.lib.front_plot import Panel, fronts_svg
from bench.lib.minute_series import SERVEGEN, minute_demand
from bench.lib.progress import progress_line
from predictor.base import Forecast, ForecastError, History
from predictor.registry import make_forecaster
from predictor.series_csv import read_series_csv

REPO_SERIES = Path(__file__).resolve().parents[1] / "data" / "traces" / "series"
MODEL = "auto"
REPLICAS_AT_MEDIAN = 20
BASELINE_TARGET = 0.7
TARGET_SAVING = 0.15
TARGET_ORACLE_RATIO = 1.35
DERIVED_MINUTES = 2 * 1440
DERIVED_QUICK_MINUTES = 1440
DERIVED_STARTUPS_SECONDS = (120.0, 300.0, 600.0)
REACTIVE_TARGETS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
ATTAINMENT_TARGETS = (0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998, 0.999)
QUICK_REACTIVE_TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
QUICK_ATTAINMENT_TARGETS = (0.95, 0.98, 0.995, 0.999)
FORECAST_POLICIES = ("predictive", "hybrid")

Knob = Callable[[PolicySettings, float], PolicySettings]


progress = progress_line("autoscaling")


@dataclass(frozen=True)
class Point:
    """One run: the knob's value and what the run cost and attained."""

    knob: float
    attainment: float
    replica_hours: float
    scale_events: int
    flaps: int
    warm_attainment: float | None = None  # predictive policies: from the first forecast-backed fleet on

    def row(self) -> dict[str, float | int | None]:
        row: dict[str, float | int | None] = {
            "knob": self.knob,
            "attainment": round(self.attainment, 4),
            "replica_hours": round(self.replica_hours, 2),
            "scale_events": self.scale_events,
            "flaps": self.flaps,
        }
        if self.warm_attainment is not None:
            row["attainment_after_warmup"] = round(self.warm_attainment, 4)
        return row


class CachedForecast:
    """``auto`` fitted on the rows up to the origin, one fit per (origin, horizon) however many policies ask."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], Forecast | ForecastError] = {}
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, history: History, horizon: int) -> Forecast:
        key = (len(history), horizon)
        if key not in self._cache:
            started = time.perf_counter()
            try:
                self._cache[key] = make_forecaster(MODEL).fit(history).predict(horizon)
            except ForecastError as exc:
                self._cache[key] = exc
            self.seconds += time.perf_counter() - started
            self.calls += 1
        answer = self._cache[key]
        if isinstance(answer, ForecastError):
            raise answer
        return answer


def foresight(history: History) -> Callable[[History, int], Forecast]:
    """A forecast that is the trace's own future (yhat = lo = hi): not causal, like the oracle; predictive fed it at
    full utilization shows what the policy and the startup cost over the oracle when the forecast is perfect."""
    values = np.nan_to_num(history.values, nan=0.0)

    def future(past: History, horizon: int) -> Forecast:
        ahead = values[np.minimum(np.arange(len(past), len(past) + horizon), len(values) - 1)]
        return Forecast(ahead, ahead, ahead)

    return future


def flaps(result: SimulationResult) -> int:
    """Scale-downs undone at the very next decision: a replica removed and asked for again one step later, which
    pays a startup for nothing. Desired 20 → 18 → 21 is one flap; 20 → 18 → 18 → 21 is none."""
    desired = [s.desired for s in result.steps]
    return sum(1 for a, b, c in zip(desired, desired[1:], desired[2:], strict=False) if b < a and c > b)


def measure(
    history: History,
    policy: str,
    settings: SimulationSettings,
    forecast: Callable[[History, int], Forecast],
    knob: float,
) -> Point:
    result = simulate(history, policy, settings, forecast=forecast)
    attainment = result.slo_attainment(settings.capacity_per_replica)
    warm = None
    if policy in {"predictive", "hybrid"}:
        warm = warm_attainment(
            result, settings.capacity_per_replica, startup_steps(settings.startup_seconds, history.step_seconds)
        )
    return Point(knob, attainment or 0.0, result.replica_hours, result.scale_events, flaps(result), warm)


def warm_attainment(result: SimulationResult, capacity: float, startup: int) -> float | None:
    """Attainment from the step where the first decision that had a forecast is ready: before it the forecaster has
    too few observations (``auto`` needs 3) and the policy is reactive, cold. A trace that opens on an idle minute
    and jumps 30× at the next (the Azure ones) misses there whatever the forecaster."""
    first = next((i for i, s in enumerate(result.steps) if "predictive off" not in s.reason), None)
    if first is None:
        return None
    warm = replace(result, steps=result.steps[first + startup :])
    return warm.slo_attainment(capacity)


def replica_hours_at(curve: Sequence[Point], attainment: float) -> float | None:
    """The curve's replica-hours at ``attainment``: the cheapest point reaching it, or the straight line between the
    two frontier points around it; None when no point reaches it. Points (0.97, 100) and (0.99, 120) → 110 at 0.98."""
    reaching = [p for p in curve if p.attainment >= attainment - 1e-12]
    if not reaching:
        return None
    upper = min(reaching, key=lambda p: (p.replica_hours, -p.attainment))
    below = [p for p in curve if p.attainment < attainment and p.replica_hours < upper.replica_hours]
    if not below:
        return upper.replica_hours
    lower = max(below, key=lambda p: (p.attainment, -p.replica_hours))
    share = (attainment - lower.attainment) / (upper.attainment - lower.attainment)
    return lower.replica_hours + share * (upper.replica_hours - lower.replica_hours)


def attainment_at(curve: Sequence[Point], replica_hours: float) -> float | None:
    """The front's attainment at ``replica_hours``: the best attainment among points costing at most that, or the
    straight line toward the next dearer point; None when every point costs more. Points (0.97, 100) and (0.99, 120)
    → 0.98 at 110."""
    cheaper = [p for p in curve if p.replica_hours <= replica_hours + 1e-12]
    if not cheaper:
        return None
    lower = max(cheaper, key=lambda p: (p.attainment, -p.replica_hours))
    dearer = [p for p in curve if p.replica_hours > replica_hours and p.attainment > lower.attainment]
    if not dearer:
        return round(lower.attainment, 4)
    upper = min(dearer, key=lambda p: (p.replica_hours, -p.attainment))
    share = (replica_hours - lower.replica_hours) / (upper.replica_hours - lower.replica_hours)
    return round(lower.attainment + share * (upper.attainment - lower.attainment), 4)


def _reactive(settings: PolicySettings, value: float) -> PolicySettings:
    return replace(settings, target_utilization=value)


def _attainment(settings: PolicySettings, value: float) -> PolicySettings:
    """Predictive's and hybrid's knob: the attainment their bound's band scale is adapted toward (hybrid's reactive
    floor stays at its default target: what a user who only sets the SLO runs)."""
    return replace(settings, attainment_target=value)


def sweeps(quick: bool) -> dict[str, tuple[Knob, tuple[float, ...]]]:
    reactive = QUICK_REACTIVE_TARGETS if quick else REACTIVE_TARGETS
    targets = QUICK_ATTAINMENT_TARGETS if quick else ATTAINMENT_TARGETS
    return {"reactive": (_reactive, reactive), "predictive": (_attainment, targets), "hybrid": (_attainment, targets)}


def capacity_for(history: History) -> float:
    """Per-replica capacity: the series' median demand over 20, so the median takes 20 replicas (the mean when the
    median is 0, a series mostly idle)."""
    values = history.values[np.isfinite(history.values)]
    typical = float(np.median(values)) or float(np.mean(values)) or 1.0
    return typical / REPLICAS_AT_MEDIAN


@dataclass(frozen=True)
class SeriesFigures:
    """One series' default runs (every policy, the oracle, predictive with foresight), its sweeps and the baseline."""

    capacity: float
    step_seconds: float
    startup_seconds: float
    steps: int
    forecast_calls: int
    forecast_seconds: float
    defaults: dict[str, Point]
    curves: dict[str, list[Point]]
    baseline: Point

    def ratio_to_reactive70(self, policy: str) -> float | None:
        """The policy's curve at the baseline's attainment over the baseline's replica-hours."""
        matched = replica_hours_at(self.curves[policy], self.baseline.attainment)
        return None if matched is None else round(matched / self.baseline.replica_hours, 4)

    def ratio_to_oracle(self, policy: str) -> float:
        return round(self.defaults[policy].replica_hours / self.defaults[ORACLE].replica_hours, 4)

    def ratio_to_reactive_front(self, policy: str) -> float | None:
        """The policy's default replica-hours over what reactive's front needs for the attainment it reached (None:
        no reactive target in the sweep reaches it)."""
        point = self.defaults[policy]
        matched = replica_hours_at(self.curves["reactive"], point.attainment)
        return None if matched is None else round(point.replica_hours / matched, 4)

    def better(self) -> str | None:
        """Predictive or hybrid, whichever reaches reactive-70's attainment at its defaults for fewer replica-hours
        against reactive's front (None: neither reaches it)."""
        reaching = [
            (ratio, name)
            for name in FORECAST_POLICIES
            if self.defaults[name].attainment >= self.baseline.attainment - 1e-12
            and (ratio := self.ratio_to_reactive_front(name)) is not None
        ]
        return min(reaching)[1] if reaching else None

    def attainment_at_baseline_cost(self, policy: str) -> float | None:
        """The attainment the policy's front reaches at reactive-70's replica-hours: what predicting buys at the
        HPA's cost, where bursts outrun the cold start."""
        return attainment_at(self.curves[policy], self.baseline.replica_hours)

    def to_json(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "step_seconds": self.step_seconds,
            "capacity_per_replica": round(self.capacity, 6),
            "startup_seconds": self.startup_seconds,
            "forecast_calls": self.forecast_calls,
            "forecast_ms_per_call": round(1000 * self.forecast_seconds / max(self.forecast_calls, 1), 3),
            "defaults": {name: p.row() for name, p in self.defaults.items()},
            "baseline": self.baseline.row(),
            "curves": {name: [p.row() for p in curve] for name, curve in self.curves.items()},
            **{f"{name}_ratio_to_reactive70": self.ratio_to_reactive70(name) for name in FORECAST_POLICIES},
            **{f"{name}_ratio_to_reactive_front": self.ratio_to_reactive_front(name) for name in FORECAST_POLICIES},
            **{f"{name}_ratio_to_oracle": self.ratio_to_oracle(name) for name in FORECAST_POLICIES},
            **{
                f"{name}_attainment_at_reactive70_cost": self.attainment_at_baseline_cost(name)
                for name in FORECAST_POLICIES
            },
            "better": self.better(),
        }


def evaluate_series(history: History, quick: bool, startup_seconds: float | None = None) -> SeriesFigures:
    """Default runs of every policy, the oracle, predictive with foresight and the sweeps, for one series; a replica
    starts in ``startup_seconds`` (default: one step)."""
    capacity = capacity_for(history)
    startup = history.step_seconds if startup_seconds is None else startup_seconds
    settings = SimulationSettings(capacity_per_replica=capacity, startup_seconds=startup)
    forecast = CachedForecast()
    defaults = {
        name: measure(history, name, settings, forecast, math.nan)
        for name in ("static", "reactive", "predictive", "hybrid", ORACLE)
    }
    perfect = replace(settings, policy=replace(settings.policy, predictive_utilization=1.0))
    defaults["foresight"] = measure(history, "predictive", perfect, foresight(history), 1.0)
    curves = {
        name: [measure(history, name, replace(settings, policy=knob(settings.policy, v)), forecast, v) for v in values]
        for name, (knob, values) in sweeps(quick).items()
    }
    baseline_settings = replace(settings, policy=_reactive(settings.policy, BASELINE_TARGET))
    baseline = measure(history, "reactive", baseline_settings, forecast, BASELINE_TARGET)
    return SeriesFigures(
        capacity,
        history.step_seconds,
        startup,
        len(history),
        forecast.calls,
        forecast.seconds,
        defaults,
        curves,
        baseline,
    )


def load_series(directory: Path) -> dict[str, History]:
    return {path.stem: read_series_csv(path).history for path in sorted(directory.glob("*.csv"))}


def derived_series(quick: bool) -> dict[str, tuple[History, float]]:
    """The ServeGen series made minute-level (``bench.lib.minute_series``: two days, one with ``--quick``), each with
    the cold starts of real replicas — 2, 5 and 10 minutes (2 and 10 with ``--quick``)."""
    minutes = DERIVED_QUICK_MINUTES if quick else DERIVED_MINUTES
    startups = (120.0, 600.0) if quick else DERIVED_STARTUPS_SECONDS
    return {
        f"{name.removesuffix('_requests_per_10min')}_req_per_1min_derived_startup_{startup / 60:g}min": (
            minute_demand(name, minutes),
            startup,
        )
        for name in SERVEGEN
        for startup in startups
    }


def report(name: str, figures: SeriesFigures) -> None:
    """The series' default runs and ratios on stderr, one line per policy."""
    progress(f"{name}: capacity {figures.capacity:.6g}/replica, startup {figures.startup_seconds:g} s")
    for policy, point in figures.defaults.items():
        warm = "" if point.warm_attainment is None else f" (after warm-up {point.warm_attainment:.4f})"
        progress(
            f"  {policy:<11} attainment {point.attainment:.4f}  replica-hours {point.replica_hours:>10.2f}  "
            f"events {point.scale_events:>5}  flaps {point.flaps:>4}{warm}"
        )
    for policy in FORECAST_POLICIES:
        progress(
            f"  {policy}: × reactive's front at its attainment {figures.ratio_to_reactive_front(policy)}, "
            f"× oracle {figures.ratio_to_oracle(policy)}, attainment at reactive-70's cost "
            f"{figures.attainment_at_baseline_cost(policy)}"
        )


def summarise(per_series: dict[str, SeriesFigures], seconds: float) -> dict[str, object]:
    """The last line: per series, the better of predictive and hybrid at their defaults (:meth:`SeriesFigures.better`)
    against reactive's front at the same attainment; ``ratio`` is its geometric mean over series (a series where
    neither reaches reactive-70's attainment has no ratio and fails the target)."""
    better = {name: f.better() for name, f in per_series.items()}
    ratios = {name: None if b is None else per_series[name].ratio_to_reactive_front(b) for name, b in better.items()}
    oracle = {name: None if b is None else per_series[name].ratio_to_oracle(b) for name, b in better.items()}
    matched = [r for r in ratios.values() if r is not None]
    return {
        "bench": "autoscaling",
        "series": len(per_series),
        "model": MODEL,
        "baseline": "the reactive HPA's front over its target utilization, at the same attainment",
        "baseline_replica_hours": round(sum(f.baseline.replica_hours for f in per_series.values()), 2),
        "ratio": round(float(np.exp(np.mean(np.log(matched)))), 4) if matched else None,
        "better_per_series": better,
        "ratio_per_series": ratios,
        "oracle_ratio_per_series": oracle,
        "attainment_per_series": {
            name: {p: round(f.defaults[p].attainment, 4) for p in ("reactive", *FORECAST_POLICIES)}
            for name, f in per_series.items()
        },
        "flaps_per_series": {
            name: {p: f.defaults[p].flaps for p in FORECAST_POLICIES} for name, f in per_series.items()
        },
        "targets_met": {
            "reactive70_attainment": all(b is not None for b in better.values()),
            "saving_15_percent": len(matched) == len(ratios) and all(r <= 1 - TARGET_SAVING for r in matched),
            "oracle_1_35": all(r is not None and r <= TARGET_ORACLE_RATIO for r in oracle.values()),
        },
        "seconds": round(seconds, 1),
        "detail": {name: f.to_json() for name, f in per_series.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.autoscaling", description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=None, help="series CSVs (default: the traces)")
    parser.add_argument("--quick", action="store_true", help="4–5 knob values per policy instead of 8–10")
    parser.add_argument("--plot", type=Path, default=None, help="draw every series' fronts into this SVG file")
    args = parser.parse_args(argv)
    directory = args.directory or REPO_SERIES
    series = load_series(directory)
    if not series:
        print(f"bench.autoscaling: no *.csv series in {directory}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    per_series = {}
    for name, history in series.items():
        per_series[name] = evaluate_series(history, args.quick)
        report(name, per_series[name])
    if args.directory is None:  # the trace set's own: its ServeGen series minute-level too, with real cold starts
        for name, (history, startup) in derived_series(args.quick).items():
            per_series[name] = evaluate_series(history, args.quick, startup)
            report(name, per_series[name])
    if args.plot is not None:
        args.plot.write_text(fronts_svg({name: plotted(f) for name, f in per_series.items()}))
        progress(f"fronts drawn into {args.plot}")
    print(json.dumps(summarise(per_series, time.perf_counter() - started)))
    return 0


def plotted(figures: SeriesFigures) -> Panel:
    """One series' fronts and default points for the plot, replica-hours over the oracle's."""
    oracle = figures.defaults[ORACLE].replica_hours
    fronts = {
        name: [(p.replica_hours / oracle, p.attainment) for p in sorted(curve, key=lambda p: p.replica_hours)]
        for name, curve in figures.curves.items()
    }
    defaults = {
        name: (figures.defaults[name].replica_hours / oracle, figures.defaults[name].attainment)
        for name in ("reactive", *FORECAST_POLICIES)
    }
    return Panel(fronts, defaults)


if __name__ == "__main__":
    sys.exit(main())
