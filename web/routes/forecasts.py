"""``GET /api/v1/pools/{name}/forecast``, ``/pools/{name}/forecast-accuracy`` and ``GET /api/v1/nodes/{id}/forecast``:
the forecast loop's latest output, and how the pool's forecasts have scored.

A forecast whose last attempt failed is still served, with ``stale: true`` and the ``error``: the autoscaler and the
dashboard must be able to tell old numbers from new ones. No forecast yet answers 404 (the loop needs rolled-up
minutes first); only failures so far answer 503 with the reason.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, status
from pydantic import BaseModel, Field

from predictor.accuracy import distrusted
from predictor.store import StoredForecast, SubjectKind
from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, ApiError, error_responses, not_found

router = APIRouter(tags=["forecasts"], responses=ERROR_RESPONSES)


class PointOut(BaseModel):
    ts: float
    yhat: float
    lo: float
    hi: float
    quantiles: list[float] | None = Field(
        None, description="the forecaster's own quantiles at the forecast's `levels`; null: it gives only the band"
    )


class SelectionOut(BaseModel):
    chosen: str = Field(description="the candidate auto follows for this pool (prior or smoothing)")
    level: float = Field(description="the quantile its forecasts are scored at: the pool's slo.attainment")
    horizon_steps: int = Field(description="how many steps ahead they are scored: the pool's startup")
    scored: int = Field(description="forecasts of both candidates scored so far (the last day's)")
    losses: dict[str, float] = Field(description="each candidate's mean pinball loss over them (lower is better)")


class SaturationOut(BaseModel):
    probability: float | None
    eta_seconds: float | None
    capacity: float | None
    capacity_source: str | None = None
    capacity_missing: str | None = Field(None, description="why a pool has no per-replica capacity yet, in words")
    replicas: int | None = None
    per_replica_capacity: float | None = None


class InputsOut(BaseModel):
    start: float
    end: float


class ForecastOut(BaseModel):
    subject: str
    metric: str
    model: str
    generated_at: float
    attempted_at: float
    stale: bool
    error: str | None
    horizon_seconds: float
    step_seconds: float
    origin_ts: float
    inputs: InputsOut
    points: list[PointOut]
    saturation: SaturationOut
    levels: list[float] = Field(default_factory=list, description="the levels of each point's `quantiles`")
    selection: SelectionOut | None = Field(None, description="auto's choice for a pool; null for other models")


class NodeForecastsOut(BaseModel):
    node: str
    items: list[ForecastOut]


def _out(stored: StoredForecast) -> ForecastOut:
    good = stored.good
    if good is None:
        raise ApiError(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"no good forecast of {stored.subject!r} yet: {stored.error}",
            headers={"Retry-After": "60"},
        )
    saturation: dict[str, Any] = good.saturation or {"probability": None, "eta_seconds": None, "capacity": None}
    return ForecastOut(
        subject=good.subject,
        metric=good.metric,
        model=good.model,
        generated_at=good.generated_at,
        attempted_at=stored.attempted_at,
        stale=stored.stale,
        error=stored.error,
        horizon_seconds=good.horizon_seconds,
        step_seconds=good.step_seconds,
        origin_ts=good.origin_ts,
        inputs=InputsOut(start=good.input_start, end=good.input_end),
        points=[
            PointOut(ts=p.ts, yhat=p.yhat, lo=p.lo, hi=p.hi, quantiles=list(p.quantiles) if good.levels else None)
            for p in good.points
        ],
        saturation=SaturationOut(**saturation),
        levels=list(good.levels),
        selection=None if good.selection is None else SelectionOut(**asdict(good.selection)),
    )


@router.get("/pools/{name}/forecast", responses=error_responses(404))
def pool_forecast(name: str, services: ServicesDep, _token: ViewerToken) -> ForecastOut:
    """The pool's demand 15 minutes ahead with its 90 % band, and the chance it outgrows its ready replicas."""
    stored = services.forecasts.get(SubjectKind.POOL, name)
    if stored is None:
        raise not_found(
            f"no forecast for pool {name!r}: the pool has not reported rolled-up minutes, or the loop has not run yet"
        )
    return _out(stored)


@router.get("/nodes/{node_id}/forecast", responses=error_responses(404))
def node_forecasts(node_id: str, services: ServicesDep, _token: ViewerToken) -> NodeForecastsOut:
    """The node's GPU-memory and KV-cache forecasts, each with its chance of exhaustion within the horizon."""
    stored = [
        s
        for kind in (SubjectKind.DEVICE, SubjectKind.REPLICAS)
        for s in services.forecasts.list(kind, subject_prefix=f"{node_id}/")
        if s.good is not None
    ]
    if not stored:
        raise not_found(f"no forecasts for node {node_id!r} yet")
    return NodeForecastsOut(node=node_id, items=[_out(s) for s in stored])


class WindowAccuracyOut(BaseModel):
    window: str = Field(description="24h or 7d, by forecast origin")
    forecasts: int = Field(description="forecasts scored (all their targets have come)")
    points: int = Field(description="(origin, target) pairs scored")
    mase: float | None = Field(description="absolute error over the naive forecast's on the same pairs; < 1 is better")
    coverage90: float | None = Field(description="share of targets inside the 90 % interval; 0.90 is calibrated")
    saturation_precision: float | None = Field(description="saturation warnings (probability ≥ 0.5) that came true")
    saturation_recall: float | None = Field(description="saturations that were warned of")


class ForecastAccuracyOut(BaseModel):
    pool: str
    metric: str
    distrusted: str | None = Field(description="why the autoscaler does not follow the forecast now; null: it does")
    windows: list[WindowAccuracyOut]


@router.get("/pools/{name}/forecast-accuracy", responses=error_responses(404))
def pool_forecast_accuracy(name: str, services: ServicesDep, _token: ViewerToken) -> ForecastAccuracyOut:
    """How the pool's live forecasts have done against the demand that came, over the last 24 h and 7 days."""
    stored = services.forecasts.get(SubjectKind.POOL, name)
    if stored is None or stored.accuracy is None:
        raise not_found(f"no scored forecast for pool {name!r} yet: a forecast is scored once its horizon has passed")
    day = stored.accuracy.get("24h")
    return ForecastAccuracyOut(
        pool=name,
        metric=stored.metric,
        distrusted=distrusted(day) if day is not None else None,
        windows=[WindowAccuracyOut(**asdict(w)) for w in stored.accuracy.values()],
    )
