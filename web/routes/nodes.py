"""``GET /api/v1/nodes`` and ``/nodes/{id}``: the registry with liveness and the latest values."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from collector.registry import NodeStatus, NodeView
from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, error_responses, not_found

router = APIRouter(tags=["nodes"], responses=ERROR_RESPONSES)


class GpuOut(BaseModel):
    index: int
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    driver_version: str | None


class SeriesOut(BaseModel):
    device: int | None
    pool: str | None
    ts: float
    metrics: dict[str, float]
    extra: dict[str, Any] | None


class NodeOut(BaseModel):
    id: str
    status: NodeStatus
    hostname: str | None
    agent_version: str | None
    first_seen: float
    last_seen: float
    last_sample_ts: float | None
    gpus: list[GpuOut]
    latest: dict[str, float]
    series: list[SeriesOut]
    source: Literal["agent", "remote_write", "otlp"] = Field(
        description="who reports it: its fleetpilot agent (500 ms samples), or a Prometheus or OpenTelemetry collector"
    )
    resolution_seconds: float | None = Field(description="seconds between its scraped samples; null for an agent")


class NodePage(BaseModel):
    items: list[NodeOut]
    next: str | None


def _out(view: NodeView) -> NodeOut:
    return NodeOut(
        id=view.id,
        status=view.status,
        hostname=view.hostname,
        agent_version=view.agent_version,
        first_seen=view.first_seen,
        last_seen=view.last_seen,
        last_sample_ts=view.last_sample_ts,
        resolution_seconds=view.resolution_seconds,
        gpus=[GpuOut(**vars(g)) for g in view.gpus],
        source=view.source,
        latest=view.latest,
        series=[
            SeriesOut(device=s.device, pool=s.pool, ts=s.ts, metrics=s.metrics, extra=s.extra) for s in view.series
        ],
    )


@router.get("/nodes")
def nodes(
    services: ServicesDep,
    _token: ViewerToken,
    cursor: Annotated[str | None, Query(description="the `next` of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> NodePage:
    views = services.fleet.node_page(services.clock(), after=cursor, limit=limit + 1)
    page = views[:limit]
    return NodePage(items=[_out(v) for v in page], next=page[-1].id if len(views) > limit else None)


@router.get("/nodes/{node_id}", responses=error_responses(404))
def node(node_id: str, services: ServicesDep, _token: ViewerToken) -> NodeOut:
    view = services.fleet.node(node_id, services.clock())
    if view is None:
        raise not_found(f"no node {node_id!r}")
    return _out(view)
