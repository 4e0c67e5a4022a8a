"""``GET /api/v1/capacity-plan``: the replicas, GPUs, nodes and cost each pool needs next week and next month.

Inputs per pool: its demand over the stored rollups (up to 30 days), the per-replica capacity (configured, else the
one the forecast loop learned from the metrics, else the rule of thumb of 8 GPUs per 1,000 requests/s), its GPUs per
replica, and the server's ``gpu_hour_cost`` and ``gpus_per_node``; growth and cost may be overridden per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from fleet.pools import DemandMetric, Pool, PoolSpec
from predictor import inputs
from predictor.capacity import replica_capacity
from predictor.capacity_plan import PlanInputs, plan_capacity
from predictor.store import SubjectKind
from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, error_responses, not_found
from web.services import AppServices

router = APIRouter(tags=["capacity"], responses=ERROR_RESPONSES)
PLAN_HISTORY_DAYS = 30.0


class HorizonOut(BaseModel):
    name: str
    days: float
    peak_demand: float
    replicas: int
    gpus: int
    nodes: int
    cost: float | None


class PoolPlanOut(BaseModel):
    pool: str
    demand_metric: DemandMetric
    current_peak: float
    growth_per_month: float
    growth_source: str
    per_replica_capacity: float
    capacity_source: str
    gpus_per_replica: int
    gpu_hour_cost: float
    horizons: list[HorizonOut]


class CapacityPlanOut(BaseModel):
    items: list[PoolPlanOut]
    skipped: dict[str, str]  # pool → why it has no plan (no demand recorded, ...)


def _plan(
    services: AppServices, name: str, spec: PoolSpec, growth: float | None, cost: float, headroom: float
) -> PoolPlanOut:
    stored = services.forecasts.get(SubjectKind.POOL, name, spec.demand_metric.value)
    capacity = replica_capacity(spec.replica_capacity, lambda: stored.learned_capacity if stored else None)
    if capacity is None and spec.demand_metric is not DemandMetric.REQUESTS:
        raise ValueError("no per-replica capacity measured or configured, and the rule of thumb is in requests/s")
    history_seconds = PLAN_HISTORY_DAYS * 86_400
    demand = inputs.recent_pool_demand(
        services.engine, name, spec.demand_metric.value, now=services.clock(), history_seconds=history_seconds
    )
    if demand is None:
        raise ValueError("no rolled-up demand yet")
    configured = capacity is not None and capacity.source == "configured"
    plan = plan_capacity(
        demand,
        PlanInputs(
            per_replica_capacity=None if capacity is None else capacity.per_replica,
            gpus_per_replica=spec.gpus_per_replica,
            gpus_per_node=services.settings.gpus_per_node,
            gpu_hour_cost=cost,
            growth_per_month=growth,
            headroom=headroom,
        ),
    )
    return PoolPlanOut(
        pool=name,
        demand_metric=spec.demand_metric,
        current_peak=plan.current_peak,
        growth_per_month=plan.growth_per_month,
        growth_source=plan.growth_source,
        per_replica_capacity=plan.per_replica_capacity,
        capacity_source="configured" if configured else plan.capacity_source,
        gpus_per_replica=spec.gpus_per_replica,
        gpu_hour_cost=cost,
        horizons=[HorizonOut(**vars(h)) for h in plan.horizons],
    )


@router.get("/capacity-plan", responses=error_responses(404))
def capacity_plan(
    services: ServicesDep,
    _token: ViewerToken,
    pool: str | None = None,
    growth_per_month: Annotated[
        float | None, Query(gt=-1, allow_inf_nan=False, description="0.1 = +10 %/month; default: fitted")
    ] = None,
    gpu_hour_cost: Annotated[
        float | None, Query(ge=0, allow_inf_nan=False, description="default: the server's gpu_hour_cost")
    ] = None,
    headroom: Annotated[float, Query(ge=0, allow_inf_nan=False, description="plan for peak × (1 + headroom)")] = 0.2,
) -> CapacityPlanOut:
    """Every configured pool's plan (or one ``pool``'s); a pool without demand data is listed in ``skipped``."""
    pools: list[Pool] = services.pools.list()
    if pool is not None:
        pools = [p for p in pools if p.name == pool]
        if not pools:
            raise not_found(f"no pool {pool!r}")
    cost = services.settings.gpu_hour_cost if gpu_hour_cost is None else gpu_hour_cost
    items, skipped = [], {}
    for p in pools:
        try:
            items.append(_plan(services, p.name, p.spec, growth_per_month, cost, headroom))
        except ValueError as exc:
            skipped[p.name] = str(exc)
    return CapacityPlanOut(items=items, skipped=skipped)
