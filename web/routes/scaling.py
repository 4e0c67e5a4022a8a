"""``GET /api/v1/scaling-events`` (every decision that changed a pool, with its reasons) and
``GET /api/v1/routing/weights`` (per-node weights for a gateway: lower is better)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from autoscaler.routing import routing_weights
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Coefficients, coefficients
from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, error_responses, not_found
from web.pagination import Cursor, PageLimit, before_id, next_cursor

router = APIRouter(tags=["autoscaling"], responses=ERROR_RESPONSES)


class ScalingEventOut(BaseModel):
    id: int
    pool: str
    ts: float
    from_replicas: int
    to_replicas: int
    policy: str
    reason: str
    reason_code: ReasonCode | None = Field(
        description="what decided the replicas, from a fixed set (null: recorded before codes)"
    )
    inputs: dict[str, Any]
    outcome: str
    actuator: str
    note: str | None


class ScalingEventPage(BaseModel):
    items: list[ScalingEventOut]
    next: str | None


@router.get("/scaling-events")
def scaling_events(
    services: ServicesDep,
    _token: ViewerToken,
    pool: str | None = None,
    reason: Annotated[ReasonCode | None, Query(description="only the events of this reason code")] = None,
    limit: PageLimit = 100,
    cursor: Cursor = None,
) -> ScalingEventPage:
    """Newest first; ``reason`` keeps one reason code's events (an unknown code is 422)."""
    events = services.events.list(pool=pool, reason=reason, before=before_id(cursor), limit=limit)
    items = [ScalingEventOut(**{**vars(e), "inputs": dict(e.inputs)}) for e in events]
    return ScalingEventPage(items=items, next=next_cursor([i.id for i in items], limit))


class NodeWeightOut(BaseModel):
    node: str
    weight: float
    compute_util: float | None
    mem_util: float | None
    network_latency_seconds: float | None


class RoutingWeightsOut(BaseModel):
    pool: str | None
    coefficients: dict[str, float]
    items: list[NodeWeightOut]


@router.get("/routing/weights", responses=error_responses(404))
def weights(services: ServicesDep, _token: ViewerToken, pool: str | None = None) -> RoutingWeightsOut:
    """Weights of the up nodes (those running ``pool`` when given), with the pool's α/β/γ; lowest first."""
    coeffs = Coefficients()
    if pool is not None:
        found = services.pools.get(pool)
        if found is not None:
            coeffs = coefficients(found.spec)
    fleet = services.fleet.read(services.clock())
    loads = list(fleet.node_loads)
    if pool is not None:
        running = {p.node_id for p in fleet.pools_on_nodes if p.pool == pool}
        if not running and services.pools.get(pool) is None:
            raise not_found(f"no pool {pool!r} configured or reported")
        loads = [n for n in loads if n.node_id in running]
    scores = routing_weights(loads, coeffs)
    items = [
        NodeWeightOut(
            node=n.node_id,
            weight=scores[n.node_id],
            compute_util=n.compute_util,
            mem_util=n.mem_util,
            network_latency_seconds=n.network_latency_s,
        )
        for n in loads
        if n.node_id in scores
    ]
    items.sort(key=lambda i: (i.weight, i.node))
    return RoutingWeightsOut(
        pool=pool, coefficients={"alpha": coeffs.alpha, "beta": coeffs.beta, "gamma": coeffs.gamma}, items=items
    )
