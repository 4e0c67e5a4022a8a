"""Forecast benchmark (CONTRACT section 12): ``python -m bench.forecast [--quick]``.

One forecasting cycle (:func:`predictor.cycle.forecast_cycle`, the default model) over 1,000 series of two days at
1-minute steps, 15 steps ahead, against the baseline of the same cycle with statsmodels ETS series by series (timed on
a sample and extrapolated to all series). The series are synthesised, seeded, from the shapes of the project's
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forecast", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="baseline on 5 series instead of 20 (under 60 s)")
    parser.add_argument("--series", type=int, default=1000, help="series in the cycle (default 1,000)")
    args = parser.parse_args(argv)
    histories = synthesise(args.series)
    progress(f"{len(histories)} series × {STEPS} one-minute steps, horizon {HORIZON}; {os.cpu_count()} CPUs")
    forecast_cycle(dict(list(histories.items())[:2]), HORIZON)  # imports and first-call costs out of the timing
    seconds, ok = time_cycle(histories, DEFAULT_MODEL)
    progress(f"{DEFAULT_MODEL}: {seconds:.2f} s for the cycle, {ok} forecasts")
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
