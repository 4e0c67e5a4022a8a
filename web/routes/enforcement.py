"""``GET /api/v1/enforcement-events``: every throttle and restore of a noisy tenant, with its reason and figures."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from web.auth import ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES
from web.pagination import Cursor, PageLimit, before_id, next_cursor

router = APIRouter(tags=["isolation"], responses=ERROR_RESPONSES)


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


@router.get("/enforcement-events")
def enforcement_events(
    services: ServicesDep,
    _token: ViewerToken,
    tenant: str | None = None,
    limit: PageLimit = 100,
    cursor: Cursor = None,
) -> EnforcementEventPage:
    """Newest first."""
    events = services.enforcement.list(tenant=tenant, before=before_id(cursor), limit=limit)
    items = [EnforcementEventOut(**{**vars(e), "scope": e.scope, "figures": dict(e.figures)}) for e in events]
    return EnforcementEventPage(items=items, next=next_cursor([i.id for i in items], limit))
