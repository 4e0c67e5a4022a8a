"""Numbers for a benchmark's JSON line: rounded, and None where there is none (NaN and infinities are not JSON)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from wire.percentile import percentile


def figure(value: float, digits: int = 3) -> float | None:
    """``value`` rounded to ``digits``; None for NaN or an infinity."""
    return round(value, digits) if math.isfinite(value) else None


def percentile_or_nan(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in percent) of ``values``; NaN for none, which ``figure`` writes as None."""
    return percentile(values, q) if values else math.nan
