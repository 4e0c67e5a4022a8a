"""Each pool's forecasts kept until they are scored, their scores kept a week, and the windows' accuracy.

Every good pool forecast is kept (``forecast_scores``: its points, the capacity and saturation probability it was
judged with); at each cycle the ones whose last target has arrived are scored against the pool's history the cycle
just read (:func:`predictor.accuracy.score_forecast`), their points dropped, their sums kept; the windows (24 h,
7 days) are sums over those rows. Rows older than the longest window go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Double,
    Index,
    Integer,
    String,
    Table,
    and_,
    case,
    delete,
    func,
    select,
    update,
)

from collector.tables import metadata
from predictor.accuracy import WINDOWS_SECONDS, ForecastScore, ScoreSums, WindowAccuracy, score_forecast
from predictor.base import History
from predictor.store import GoodForecast

forecast_scores = Table(
    "forecast_scores",
    metadata,
    Column("kind", String(16), primary_key=True),
    Column("subject", String(260), primary_key=True),
    Column("metric", String(64), primary_key=True),
    Column("origin_ts", Double, primary_key=True),
    Column("points", JSON, nullable=True),  # [[ts, yhat, lo, hi], ...] until scored
    Column("capacity", Double, nullable=True),
    Column("probability", Double, nullable=True),
    Column("scored", Boolean, nullable=False, default=False),
    Column("points_scored", Integer, nullable=True),
    Column("abs_error", Double, nullable=True),
    Column("naive_error", Double, nullable=True),
    Column("covered", Integer, nullable=True),
    Column("warned", Boolean, nullable=True),
    Column("saturated", Boolean, nullable=True),
    Index("ix_forecast_scores_due", "kind", "subject", "metric", "scored"),
)

Key = tuple[str, str, str]  # (kind, subject, metric)


def keep(conn: Connection, good: Sequence[GoodForecast]) -> None:
    """Keep each forecast to score later (a resent origin replaces nothing: the first forecast from it stands)."""
    rows = [
        {
            "kind": g.kind.value,
            "subject": g.subject,
            "metric": g.metric,
            "origin_ts": g.origin_ts,
            "points": [[p.ts, p.yhat, p.lo, p.hi] for p in g.points],
            "capacity": (g.saturation or {}).get("capacity"),
            "probability": (g.saturation or {}).get("probability"),
            "scored": False,
        }
        for g in good
    ]
    if not rows:
        return
    known = {
        (r.kind, r.subject, r.metric, r.origin_ts)
        for r in conn.execute(
            select(
                forecast_scores.c.kind, forecast_scores.c.subject, forecast_scores.c.metric, forecast_scores.c.origin_ts
            ).where(forecast_scores.c.origin_ts.in_(sorted({r["origin_ts"] for r in rows})))
        )
    }
    fresh = [r for r in rows if (r["kind"], r["subject"], r["metric"], r["origin_ts"]) not in known]
    if fresh:
        conn.execute(forecast_scores.insert(), fresh)


def score_due(conn: Connection, histories: Mapping[Key, History]) -> int:
    """Score every kept forecast of these subjects whose targets have all arrived; answer how many were scored."""
    c = forecast_scores.c
    scored = 0
    for (kind, subject, metric), history in histories.items():
        due = conn.execute(
            select(c.origin_ts, c.points, c.capacity, c.probability).where(
                c.kind == kind, c.subject == subject, c.metric == metric, c.scored.is_(False)
            )
        ).all()
        for origin_ts, points, capacity, probability in due:
            found = score_forecast(
                origin_ts, [tuple(p) for p in points], history, capacity=capacity, probability=probability
            )
            if found is None and points and points[-1][0] <= history.end_ts:
                found = ForecastScore(origin_ts, 0, 0.0, 0.0, 0, None, None)  # its targets came as gaps
            if found is None:
                continue
            conn.execute(
                update(forecast_scores)
                .where(c.kind == kind, c.subject == subject, c.metric == metric, c.origin_ts == origin_ts)
                .values(_score_columns(found))
            )
            scored += 1
    return scored


def _score_columns(found: ForecastScore) -> dict[str, Any]:
    return {
        "points": None,
        "scored": True,
        "points_scored": found.points,
        "abs_error": found.abs_error,
        "naive_error": found.naive_error,
        "covered": found.covered,
        "warned": found.warned,
        "saturated": found.saturated,
    }


def accuracy(conn: Connection, key: Key, *, now: float) -> dict[str, WindowAccuracy]:
    """The subject's accuracy over each window of ``WINDOWS_SECONDS`` ending ``now`` (by forecast origin), summed in
    the database: a week of one-a-minute forecasts is 10,080 rows a pool, read as one row."""
    c = forecast_scores.c
    judged = and_(c.warned.is_not(None), c.saturated.is_not(None))
    sums = (
        func.count(),
        func.coalesce(func.sum(c.points_scored), 0),
        func.coalesce(func.sum(c.abs_error), 0.0),
        func.coalesce(func.sum(c.naive_error), 0.0),
        func.coalesce(func.sum(c.covered), 0),
        func.sum(case((and_(judged, c.warned.is_(True)), 1), else_=0)),
        func.sum(case((and_(judged, c.saturated.is_(True)), 1), else_=0)),
        func.sum(case((and_(judged, c.warned.is_(True), c.saturated.is_(True)), 1), else_=0)),
    )
    found = {}
    for name, seconds in WINDOWS_SECONDS.items():
        row = conn.execute(
            select(*sums).where(
                c.kind == key[0],
                c.subject == key[1],
                c.metric == key[2],
                c.scored.is_(True),
                c.origin_ts >= now - seconds,
            )
        ).one()
        found[name] = ScoreSums(*(v or 0 for v in row)).accuracy(name)
    return found


def forget_before(conn: Connection, before: float) -> int:
    """Drop every kept forecast from before ``before`` (the longest window's start)."""
    return conn.execute(delete(forecast_scores).where(forecast_scores.c.origin_ts < before)).rowcount or 0
