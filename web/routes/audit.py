"""``GET /api/v1/audit`` (admin): every change made through the API, newest first — who, what, before and after."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from web.auth import AdminToken, ServicesDep
from web.changes.audit import AuditEntry, AuditLog
from web.errors import ERROR_RESPONSES
from web.pagination import Cursor, PageLimit, before_id, next_cursor
from web.timeparam import parse_time
from web.tokens import Role

router = APIRouter(tags=["audit"], responses=ERROR_RESPONSES)


class ActorOut(BaseModel):
    id: str = Field(description="the token's id")
    name: str
    role: Role


class AuditEntryOut(BaseModel):
    id: int
    ts: float
    request_id: str = Field(description="the X-Request-ID of the request that made the change")
    actor: ActorOut
    resource: str = Field(description="pool, tenant, tenant_key, quota, token, alert_rule, silence or webhook")
    resource_id: str
    action: str = Field(description="create, update, delete, scale or expire")
    before: Any = Field(description="the resource as the API showed it before (null on create); secrets as ***")
    after: Any = Field(description="the resource after (null on delete)")


class AuditPage(BaseModel):
    items: list[AuditEntryOut]
    next: str | None


def _out(entry: AuditEntry) -> AuditEntryOut:
    assert entry.id is not None
    return AuditEntryOut(
        id=entry.id,
        ts=entry.ts,
        request_id=entry.request_id,
        actor=ActorOut(id=entry.actor_id, name=entry.actor_name, role=Role(entry.actor_role)),
        resource=entry.resource,
        resource_id=entry.resource_id,
        action=entry.action,
        before=entry.before,
        after=entry.after,
    )


@router.get("/audit")
def audit(
    services: ServicesDep,
    _token: AdminToken,
    resource: Annotated[str | None, Query(max_length=32, description="only changes of this resource kind")] = None,
    actor: Annotated[str | None, Query(max_length=255, description="a token id or name")] = None,
    since: Annotated[str | None, Query(description="Unix seconds or ISO-8601")] = None,
    limit: PageLimit = 100,
    cursor: Cursor = None,
) -> AuditPage:
    """Newest first; ``next`` pages on to older changes."""
    entries = AuditLog(services.engine).list(
        resource=resource,
        actor=actor,
        since=None if since is None else parse_time("since", since),
        before=before_id(cursor),
        limit=limit,
    )
    items = [_out(e) for e in entries]
    return AuditPage(items=items, next=next_cursor([i.id for i in items], limit))
