"""The latest forecast of every subject (a pool's demand, a device's memory, a replica set's KV cache), persisted.

One row per (kind, subject, metric), overwritten by each good forecast. A failed or timed-out attempt keeps the last
good points and records ``error`` and ``attempted_at``: the forecast is then *stale*, and every reader (the API, the
autoscaler) can tell, because :class:`StoredForecast` says so instead of silently serving old numbers as new.
A subject that never had a good forecast and whose attempts fail for too little history is *warming up*
(:func:`warming_up`): a new pool's first minutes, not a failing forecaster (the alerting room does not page on it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, Column, Connection, Double, Engine, String, Table, and_, select

from collector.database import insert_for
from collector.tables import metadata
from predictor.accuracy import WindowAccuracy
from predictor.capacity import PoolCapacity, ReplicaCapacity


class SubjectKind(StrEnum):
    POOL = "pool"  # a pool's demand (request or token rate), against its capacity
    DEVICE = "device"  # a GPU's memory, against its total ("node/0")
    REPLICAS = "replicas"  # a node's replicas of a pool: KV-cache use, against 1 ("node/pool")


forecasts = Table(
    "forecasts",
    metadata,
    Column("kind", String(16), primary_key=True),
    Column("subject", String(260), primary_key=True),
    Column("metric", String(64), primary_key=True),
    Column("generated_at", Double, nullable=True),  # the last good forecast; null until one succeeds
    Column("attempted_at", Double, nullable=False),
    Column("model", String(64), nullable=True),
    Column("origin_ts", Double, nullable=True),
    Column("step_seconds", Double, nullable=True),
    Column("horizon_seconds", Double, nullable=True),
    Column("input_start", Double, nullable=True),
    Column("input_end", Double, nullable=True),
    Column("points", JSON, nullable=True),  # [[ts, yhat, lo, hi], ...]
    Column("saturation", JSON, nullable=True),
    Column("error", String(1000), nullable=True),  # set by a failed attempt after the last good one
    # that failed attempt was for too little history (predictor.base.NotEnoughHistory); null after a good one
    Column("short_history", Boolean, nullable=True),
    # a pool's live accuracy over each window ({"24h": {...}, "7d": {...}}, predictor.accuracy), after each cycle
    Column("accuracy", JSON, nullable=True),
    # the forecaster's own quantiles: {"levels": [...], "values": [[...] per point]}; null: only the band
    Column("quantiles", JSON, nullable=True),
    # auto's choice for a pool: {"chosen", "level", "horizon_steps", "scored", "losses": {candidate: mean loss}}
    Column("selection", JSON, nullable=True),
)


Key = tuple[SubjectKind, str, str]  # (kind, subject, metric)


def warming_up(error: str | None, short_history: bool | None, generated_at: float | None) -> bool:
    """Failing only for too little history, and never forecast yet: the first fits are not done (a pool's first
    minutes). A subject that had a good forecast and then fails, for whatever reason, is failing."""
    return error is not None and bool(short_history) and generated_at is None


@dataclass(frozen=True)
class ForecastPoint:
    ts: float
    yhat: float
    lo: float
    hi: float
    quantiles: tuple[float, ...] = ()  # at the forecast's ``levels``


@dataclass(frozen=True)
class Selection:
    """Which of ``auto``'s candidates a pool follows, and how each scored at its decision point (``level``,
    ``horizon_steps``) over the last ``scored`` forecasts (mean pinball loss; :mod:`predictor.selection`)."""

    chosen: str
    level: float
    horizon_steps: int
    scored: int
    losses: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Selection:
        return cls(
            str(body["chosen"]),
            float(body["level"]),
            int(body["horizon_steps"]),
            int(body["scored"]),
            {str(k): float(v) for k, v in body["losses"].items()},
        )


@dataclass(frozen=True)
class GoodForecast:
    """What one successful attempt produced, with the time range of the inputs it was fitted on."""

    kind: SubjectKind
    subject: str
    metric: str
    generated_at: float
    model: str
    origin_ts: float
    step_seconds: float
    horizon_seconds: float
    input_start: float
    input_end: float
    points: Sequence[ForecastPoint]
    saturation: dict[str, Any] | None  # as stored and answered: the estimate and what it was measured against
    levels: tuple[float, ...] = ()  # of each point's quantiles
    selection: Selection | None = None  # auto's choice, for a pool forecast by auto

    @property
    def pool_capacity(self) -> PoolCapacity | None:
        """A pool forecast's ready replicas and per-replica capacity (the pool part of ``saturation``)."""
        if self.kind is not SubjectKind.POOL or not self.saturation:
            return None
        return PoolCapacity.from_json(self.saturation)


@dataclass(frozen=True)
class StoredForecast:
    kind: SubjectKind
    subject: str
    metric: str
    attempted_at: float
    error: str | None
    good: GoodForecast | None
    accuracy: dict[str, WindowAccuracy] | None = None  # a pool's, by window ("24h", "7d"); None: not scored yet
    short_history: bool = False  # the last attempt failed for too little history

    @property
    def stale(self) -> bool:
        """The last attempt failed (the points, if any, are from an earlier cycle)."""
        return self.error is not None

    @property
    def warming_up(self) -> bool:
        return warming_up(self.error, self.short_history, None if self.good is None else self.good.generated_at)

    @property
    def learned_capacity(self) -> ReplicaCapacity | None:
        """The per-replica capacity the loop learned from the metrics for a pool, when it measured one."""
        capacity = self.good.pool_capacity if self.good is not None else None
        per_replica = capacity.per_replica if capacity is not None else None
        return per_replica if per_replica is not None and per_replica.learned else None


def _good_columns(forecast: GoodForecast) -> dict[str, Any]:
    return {
        "generated_at": forecast.generated_at,
        "attempted_at": forecast.generated_at,
        "model": forecast.model,
        "origin_ts": forecast.origin_ts,
        "step_seconds": forecast.step_seconds,
        "horizon_seconds": forecast.horizon_seconds,
        "input_start": forecast.input_start,
        "input_end": forecast.input_end,
        "points": [[p.ts, p.yhat, p.lo, p.hi] for p in forecast.points],
        "saturation": forecast.saturation,
        "quantiles": (
            {"levels": list(forecast.levels), "values": [list(p.quantiles) for p in forecast.points]}
            if forecast.levels
            else None
        ),
        "selection": None if forecast.selection is None else forecast.selection.to_json(),
        "error": None,
        "short_history": None,
    }


def _stored(row: Any) -> StoredForecast:
    m = row._mapping
    kind = SubjectKind(m["kind"])
    good = None
    if m["generated_at"] is not None:
        quantiles = m["quantiles"] or {"levels": [], "values": [[] for _ in m["points"]]}
        good = GoodForecast(
            kind=kind,
            subject=m["subject"],
            metric=m["metric"],
            generated_at=m["generated_at"],
            model=m["model"],
            origin_ts=m["origin_ts"],
            step_seconds=m["step_seconds"],
            horizon_seconds=m["horizon_seconds"],
            input_start=m["input_start"],
            input_end=m["input_end"],
            points=[
                ForecastPoint(p[0], p[1], p[2], p[3], tuple(q))
                for p, q in zip(m["points"], quantiles["values"], strict=True)
            ],
            saturation=m["saturation"],
            levels=tuple(quantiles["levels"]),
            selection=None if m["selection"] is None else Selection.from_json(m["selection"]),
        )
    scored = m["accuracy"]
    accuracy = {name: WindowAccuracy(**window) for name, window in scored.items()} if scored else None
    return StoredForecast(
        kind, m["subject"], m["metric"], m["attempted_at"], m["error"], good, accuracy, bool(m["short_history"])
    )


class ForecastStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        upsert = insert_for(engine, forecasts)
        names = [c.name for c in forecasts.columns if not c.primary_key and c.name != "accuracy"]
        self._upsert = upsert.on_conflict_do_update(
            index_elements=["kind", "subject", "metric"], set_={n: upsert.excluded[n] for n in names}
        )
        failure = insert_for(engine, forecasts)
        self._record_failure = failure.on_conflict_do_update(
            index_elements=["kind", "subject", "metric"],
            set_={n: failure.excluded[n] for n in ("attempted_at", "error", "short_history")},
        )

    def save(self, good: Sequence[GoodForecast]) -> None:
        if not good:
            return
        rows = [{"kind": g.kind.value, "subject": g.subject, "metric": g.metric, **_good_columns(g)} for g in good]
        with self.engine.begin() as conn:
            conn.execute(self._upsert, rows)

    def set_accuracy(
        self, conn: Connection, kind: SubjectKind, subject: str, metric: str, scored: dict[str, WindowAccuracy]
    ) -> None:
        """Record a subject's windows of live accuracy (in the caller's transaction)."""
        c = forecasts.c
        conn.execute(
            forecasts.update()
            .where(c.kind == kind.value, c.subject == subject, c.metric == metric)
            .values(accuracy={name: asdict(window) for name, window in scored.items()})
        )

    def mark_failed(
        self,
        failures: Sequence[tuple[SubjectKind, str, str, str]],
        *,
        attempted_at: float,
        short_history: Collection[Key] = (),
    ) -> None:
        """Record (kind, subject, metric, error) failures, those of ``short_history`` as failing for too little
        history; the last good points, if any, stay and turn stale."""
        if not failures:
            return
        rows = [
            {
                "kind": k.value,
                "subject": s,
                "metric": m,
                "attempted_at": attempted_at,
                "error": e[:1000],
                "short_history": (k, s, m) in short_history,
            }
            for k, s, m, e in failures
        ]
        with self.engine.begin() as conn:
            conn.execute(self._record_failure, rows)

    def get(self, kind: SubjectKind, subject: str, metric: str | None = None) -> StoredForecast | None:
        """The subject's forecast (of ``metric``, or its most recently attempted one when None)."""
        query = select(forecasts).where(forecasts.c.kind == kind.value, forecasts.c.subject == subject)
        if metric is not None:
            query = query.where(forecasts.c.metric == metric)
        with self.engine.connect() as conn:
            row = conn.execute(query.order_by(forecasts.c.attempted_at.desc()).limit(1)).first()
        return None if row is None else _stored(row)

    def list(self, kind: SubjectKind, subject_prefix: str = "") -> list[StoredForecast]:
        query = select(forecasts).where(forecasts.c.kind == kind.value).order_by(forecasts.c.subject)
        if subject_prefix:
            query = query.where(forecasts.c.subject.startswith(subject_prefix, autoescape=True))
        with self.engine.connect() as conn:
            return [_stored(r) for r in conn.execute(query)]

    def forget(self, kind: SubjectKind, subject: str) -> None:
        """Drop a subject's forecasts (a deleted pool)."""
        with self.engine.begin() as conn:
            conn.execute(forecasts.delete().where(and_(forecasts.c.kind == kind.value, forecasts.c.subject == subject)))
