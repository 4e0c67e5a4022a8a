"""Forecast benchmark (CONTRACT section 12): ``python -m bench.forecast [--quick]``.

One forecasting cycle of the default model, ``auto``, over 1,000 pools' series of two days at 1-minute steps, 15
steps ahead, as the forecast loop runs it: both candidates for every pool (:func:`predictor.cycle.
forecast_candidates`: the prior's trees on every pool's last origin at once, the smoothing family in one batch) and
each pool's choice and calibration (:class:`predictor.auto_choice.AutoChooser`, whose ledgers a warm-up cycle fills
first, so the timed one scores a step of both candidates per pool as a running loop does). The prior is trained
offline (``scripts/train_demand_prior.py``, about a minute, once per release): a cycle pays nothing for training.
Against the baseline of the same cycle with statsmodels ETS series by series (timed on a sample and extrapolated to
all series). The series are synthesised, seeded, from the shapes of the project's
traces: a ServeGen 10-minute series' daily profile (interpolated to minutes, started at a random time of day and
scaled) times the 1-minute burstiness of an Azure series (its relative deviations from a 5-minute mean, resampled),
plus noise; one series in ten has a collection gap of 5–30 minutes. Progress goes to stderr; the last stdout line
is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench.lib.progress import progress_line
from predictor.auto_choice import AutoChooser, decision_point
from predictor.backends.auto import PRIOR, SMOOTHING
from predictor.base import FloatArray, History
from predictor.cycle import DEFAULT_MODEL, forecast_cycle
from predictor.series_csv import read_series_csv

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "series"  # the repository's copy of the trace set
DAILY_SHAPE = "servegen_m-large_requests_per_10min.csv"
BURSTS = ("azure_conv_requests_per_minute.csv", "azure_code_requests_per_minute.csv")
STEP_S = 60.0
STEPS = 2 * 1440  # two days of minutes
HORIZON = 15
TARGET_S = 10.0


progress = progress_line("forecast")


def synthesise(count: int, seed: int = 0) -> dict[str, History]:
    """``count`` two-day minute series shaped like the traces (see the module docstring); reproducible by seed."""
    rng = np.random.default_rng(seed)
    daily = read_series_csv(TRACES / DAILY_SHAPE).history.values
    minute_profile = np.interp(np.arange(len(daily) * 10) / 10.0, np.arange(len(daily)), daily)
    minute_profile /= np.nanmean(minute_profile)
    bursts = np.concatenate([_relative_bursts(read_series_csv(TRACES / name).history.values) for name in BURSTS])
    series = {}
    for i in range(count):
        start = int(rng.integers(0, len(minute_profile) - STEPS))
        level = rng.lognormal(np.log(200.0), 1.0)
        burst = rng.choice(bursts, STEPS) * rng.uniform(0.2, 1.0)
        values = level * minute_profile[start : start + STEPS] * np.maximum(1.0 + burst, 0.0)
        values += rng.normal(0.0, 0.02 * level, STEPS)
        if i % 10 == 0:
            gap = int(rng.integers(0, STEPS - 30))
            values[gap : gap + int(rng.integers(5, 31))] = np.nan
        series[f"pool-{i:04d}"] = History(np.maximum(values, 0.0), STEP_S, start_ts=start * STEP_S)
    return series


def _relative_bursts(values: FloatArray) -> FloatArray:
    """Each minute's deviation from its centred 5-minute mean, relative to it: 1.2 × the mean → 0.2."""
    mean = np.convolve(values, np.ones(5) / 5, mode="same")
    relative: FloatArray = values[2:-2] / np.maximum(mean[2:-2], 1e-9) - 1.0
    return relative


def time_cycle(histories: dict[str, History], model: str) -> tuple[float, int]:
    """Seconds for one cycle and how many series came back with a forecast."""
    started = time.perf_counter()
    outcome = forecast_cycle(histories, HORIZON, model)
    seconds = time.perf_counter() - started
    return seconds, sum(1 for value in outcome.values() if not isinstance(value, Exception))


def time_auto_cycle(histories: dict[str, History], chooser: AutoChooser) -> tuple[dict[str, float], int]:
    """Seconds of each part of one ``auto`` cycle (the prior, the smoothing family, the choices) and how many pools
    came back with a forecast."""
    parts = {}
    started = time.perf_counter()
    prior = forecast_cycle(histories, HORIZON, PRIOR)
    parts["prior"] = time.perf_counter() - started
    started = time.perf_counter()
    smoothing = forecast_cycle(histories, HORIZON, SMOOTHING)
    parts["smoothing"] = time.perf_counter() - started
    started = time.perf_counter()
    point = decision_point(0.99, 120.0, STEP_S)
    chosen = [
        chooser.choose(name, point, history, {PRIOR: prior[name], SMOOTHING: smoothing[name]})
        for name, history in histories.items()
    ]
    parts["choose"] = time.perf_counter() - started
    return parts, sum(1 for c in chosen if not isinstance(c.outcome, Exception))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forecast", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="baseline on 5 series instead of 20 (under 60 s)")
    parser.add_argument("--series", type=int, default=1000, help="series in the cycle (default 1,000)")
    args = parser.parse_args(argv)
    histories = synthesise(args.series)
    progress(f"{len(histories)} series × {STEPS} one-minute steps, horizon {HORIZON}; {os.cpu_count()} CPUs")
    chooser = AutoChooser()
    earlier = {name: h.upto(len(h) - 1) for name, h in histories.items()}  # the cycle a minute before: warm-up
    time_auto_cycle(earlier, chooser)
    parts, ok = time_auto_cycle(histories, chooser)
    seconds = sum(parts.values())
    split = ", ".join(f"{k} {v:.2f} s" for k, v in parts.items())
    progress(f"{DEFAULT_MODEL}: {seconds:.2f} s for the cycle ({split}), {ok} forecasts")
    sample = dict(list(histories.items())[: 5 if args.quick else 20])
    baseline_sample_s, baseline_ok = time_cycle(sample, "ets")
    baseline_s = baseline_sample_s * len(histories) / len(sample)
    progress(f"ets: {baseline_sample_s:.2f} s for {len(sample)} series ({baseline_ok} forecasts) → {baseline_s:.1f} s")
    figures = {
        "bench": "forecast",
        "series": len(histories),
        "steps": STEPS,
        "horizon_steps": HORIZON,
        "model": DEFAULT_MODEL,
        "seconds_per_cycle": round(seconds, 3),
        "seconds_by_part": {k: round(v, 3) for k, v in parts.items()},
        "forecasts": ok,
        "baseline": f"statsmodels ETS series by series, {len(sample)} series timed, extrapolated to {len(histories)}",
        "baseline_seconds_per_cycle": round(baseline_s, 2),
        "ratio": round(baseline_s / seconds, 1),
        "target_met": seconds < TARGET_S,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
