"""``GET /api/v1/alerts`` (viewers: pending, firing and resolved alerts, newest first, by state, rule or pool) and
``/api/v1/silences`` (operators silence by label matchers until an expiry, and expire silences early; both audited,
``web.changes.silences``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import AlertStatus
from web.auth import OperatorToken, ServicesDep, ViewerToken
from web.changes.audit import AuditorDep
from web.changes.silences import apply_silence_create, apply_silence_expire
from web.errors import ERROR_RESPONSES, error_responses
from web.pagination import Cursor, PageLimit, before_id, next_cursor
from web.schemas.alerts import AlertPage, SilenceIn, SilenceOut, SilencePage, alert_out, silence_out

router = APIRouter(tags=["alerting"], responses=ERROR_RESPONSES)


def _silences(services: ServicesDep) -> SilenceStore:
    return SilenceStore(services.engine)


SilencesDep = Annotated[SilenceStore, Depends(_silences)]


@router.get("/alerts")
def list_alerts(
    services: ServicesDep,
    silences_store: SilencesDep,
    _token: ViewerToken,
    state: Annotated[AlertStatus | None, Query(description="pending, firing or resolved")] = None,
    rule: Annotated[int | None, Query(ge=1, le=2**62, description="a rule id")] = None,
    pool: str | None = None,
    limit: PageLimit = 100,
    cursor: Cursor = None,
) -> AlertPage:
    """Newest first."""
    found = AlertStore(services.engine).list(
        status=None if state is None else state.value, rule_id=rule, pool=pool, before=before_id(cursor), limit=limit
    )
    now = services.clock()
    quiet = silences_store.list(active_at=now)
    items = [alert_out(a, quiet, now) for a in found]
    return AlertPage(items=items, next=next_cursor([i.id for i in items], limit))


@router.post("/silences", status_code=status.HTTP_201_CREATED)
def create_silence(body: SilenceIn, services: ServicesDep, _caller: OperatorToken, audit: AuditorDep) -> SilenceOut:
    now = services.clock()
    return silence_out(apply_silence_create(audit, body, now=now), now)


@router.get("/silences")
def list_silences(
    store: SilencesDep,
    services: ServicesDep,
    _token: ViewerToken,
    expired: Annotated[bool, Query(description="include expired silences")] = False,
) -> SilencePage:
    now = services.clock()
    found = store.list(active_at=None if expired else now)
    return SilencePage(items=[silence_out(s, now) for s in found])


@router.delete("/silences/{silence_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def expire_silence(silence_id: str, services: ServicesDep, _token: OperatorToken, audit: AuditorDep) -> Response:
    """Expire the silence now: its alerts notify again (a firing one at the next evaluation)."""
    apply_silence_expire(audit, silence_id, now=services.clock())
    return Response(status_code=status.HTTP_204_NO_CONTENT)
