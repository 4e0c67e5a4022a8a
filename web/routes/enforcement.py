"""``GET /api/v1/enforcement-events``: every throttle and restore of a noisy tenant, with its reason and figures."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel

from web.auth import ServicesDep, ViewerToken

router = APIRouter(tags=["isolation"])


class EnforcementEventOut(BaseModel):
    id: int
    ts: float
    tenant: str
    scope: str
    node: str
    pool: str
    kind: str
    reason: str
    level_from: float
    level_to: float
    message: str
    figures: dict[str, Any]


class EnforcementEventPage(BaseModel):
    items: list[EnforcementEventOut]
    next: str | None


@router.get("/enforcement-events", responses={422: {}})
def enforcement_events(
    services: ServicesDep,
    _token: ViewerToken,
    tenant: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(description="the `next` of the previous page")] = None,
) -> EnforcementEventPage:
    """Newest first."""
    if cursor is not None and not cursor.isdigit():
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"cursor: not a cursor this API gave: {cursor!r}")
    events = services.enforcement.list(tenant=tenant, before=None if cursor is None else int(cursor), limit=limit)
    items = [EnforcementEventOut(**{**vars(e), "scope": e.scope, "figures": dict(e.figures)}) for e in events]
    return EnforcementEventPage(items=items, next=str(items[-1].id) if len(items) == limit else None)
