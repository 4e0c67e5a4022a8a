"""The rate-oracle: the best causal policy that knows a minute series' true rate but not its arrivals' noise.

A minute series derived from ServeGen (:mod:`bench.lib.corpus`) is one draw of arrivals at known rates. Its other
draws (:meth:`~bench.lib.corpus.CorpusSeries.replicates`: same rates and burstiness, other seeds) give, minute by
minute, the distribution of demand that the rate alone implies. Knowing the rate ahead, the best a policy can do is
have ready, every minute, the replicas for that distribution's quantile at some level — no forecast error, no lag,
only the noise no one can know in advance. Swept over the level, that is the front a forecasting policy is measured
against: what is left between it and the forecast is what forecasting could still win.
"""

from __future__ import annotations

import math

import numpy as np

from bench.lib.corpus import CorpusSeries
from bench.lib.fronts import Point

LEVELS = (0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1.0)
REPLICATES = 100


def rate_oracle_front(series: CorpusSeries, capacity: float, warm: int, replicates: int = REPLICATES) -> list[Point]:
    """The rate-oracle's (attainment, replica-hours) at each level of LEVELS (1.0: the largest replicate), over the
    steps from ``warm`` on, with at least one replica ready."""
    draws = np.sort(series.replicates(replicates) / series.history.step_seconds, axis=0)
    demand = series.history.values[warm:]
    scored = np.isfinite(demand)
    points = []
    for level in LEVELS:
        row = min(max(math.ceil(level * replicates) - 1, 0), replicates - 1)
        ready = np.maximum(np.ceil(draws[row, warm:] / capacity - 1e-9), 1.0)
        attainment = float(np.mean(demand[scored] <= ready[scored] * capacity + 1e-9))
        points.append(Point(level, attainment, float(ready.sum() * series.history.step_seconds / 3600.0)))
    return points
