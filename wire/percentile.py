"""The one percentile of the project: nearest rank, as the SLOs, the node's own latency figures and the benchmarks
read it."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the value below which ``q`` percent of the values fall); values need not be sorted."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]
