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


def percentile_or_none(values: Sequence[float], q: float) -> float | None:
    """``percentile``, or None for no values: a figure that is absent, not an error (a replay with no ok answer)."""
    return percentile(values, q) if values else None
