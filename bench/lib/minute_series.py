"""Minute-level demand derived from the trace set's 10-minute ServeGen series, for the benchmarks that need it.

ServeGen's generator draws each window's arrivals from the window's rate and its burstiness (the coefficient of
variation of inter-arrival times, Gamma-distributed); the repository's copy of the trace keeps only each 10-minute
window's request count, so the derivation takes the rate and Poisson arrivals (CV 1): each window's rate (count /
600 s) is interpolated linearly between window midpoints, and each minute's count drawn from Poisson(rate × 60),
seeded. Requests per second, minute by minute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from predictor.base import History
from predictor.series_csv import read_series_csv

SERIES = Path(__file__).resolve().parents[2] / "data" / "traces" / "series"
SERVEGEN = ("servegen_m-large_requests_per_10min", "servegen_m-small_requests_per_10min")
MINUTE = 60.0


def minute_demand(name: str, minutes: int, *, seed: int = 3) -> History:
    """The first ``minutes`` minutes of series ``name`` (a ServeGen 10-minute count series) at 1-minute steps."""
    coarse = read_series_csv(SERIES / f"{name}.csv").history
    step = coarse.step_seconds
    rates = np.nan_to_num(coarse.values, nan=0.0) / step
    centres = (np.arange(len(rates)) + 0.5) * step / MINUTE
    smooth = np.interp(np.arange(minutes, dtype=float), centres, rates)
    arrivals = np.random.default_rng(seed).poisson(smooth * MINUTE)
    return History(arrivals.astype(float) / MINUTE, MINUTE, coarse.start_ts)
