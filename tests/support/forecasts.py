"""A stored pool forecast for tests, and its windows of live accuracy: what the forecast loop would have written."""

from __future__ import annotations

from predictor.accuracy import WindowAccuracy
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind


def store_scored_forecast(
    store: ForecastStore, now: float, accuracy: dict[str, WindowAccuracy], *, pool: str = "chat", hi: float = 60.0
) -> None:
    """Pool ``pool``'s request-rate forecast made at ``now`` (15 one-minute points, upper bound ``hi``), with
    ``accuracy`` as its windows."""
    points = [ForecastPoint(now + 60 * k, hi * 5 / 6, hi * 2 / 3, hi) for k in range(1, 16)]
    metric = "request_rate_per_second"
    good = GoodForecast(SubjectKind.POOL, pool, metric, now, "auto", now, 60.0, 900.0, now - 3600, now, points, None)
    store.save([good])
    with store.engine.begin() as conn:
        store.set_accuracy(conn, SubjectKind.POOL, pool, metric, accuracy)
