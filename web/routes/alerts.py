"""``GET /api/v1/alerts`` (viewers: pending, firing and resolved alerts, newest first, by state, rule or pool) and
``/api/v1/silences`` (operators silence by label matchers until an expiry, and expire silences early; both audited)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status
from pydantic import BaseModel, Field

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import Alert, AlertStatus
from alerting.silences import Matcher, MatchOp, Silence, silenced
from collector.errors import InvalidQuery
from web.audit import Auditor, AuditorDep
from web.auth import OperatorToken, ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, ApiError, error_responses, not_found, refused
from web.pagination import Cursor, PageLimit, before_id, next_cursor
from web.timeparam import parse_time

router = APIRouter(tags=["alerting"], responses=ERROR_RESPONSES)
MAX_SILENCE_SECONDS = 366 * 86400.0


def _silences(services: ServicesDep) -> SilenceStore:
    return SilenceStore(services.engine)


SilencesDep = Annotated[SilenceStore, Depends(_silences)]


class AlertOut(BaseModel):
    id: int
    rule_id: int
    fingerprint: str
    status: AlertStatus
    silenced: bool
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float | None
    active_since: float
    fired_at: float | None
    resolved_at: float | None
    last_notified_at: float | None


class AlertPage(BaseModel):
    items: list[AlertOut]
    next: str | None


def _alert_out(alert: Alert, quiet: list[Silence], now: float) -> AlertOut:
    assert alert.id is not None
    return AlertOut(
        id=alert.id,
        rule_id=alert.rule_id,
        fingerprint=alert.fingerprint,
        status=alert.status,
        silenced=alert.status is not AlertStatus.RESOLVED and silenced(alert.labels, quiet, now),
        labels=dict(alert.labels),
        annotations=dict(alert.annotations),
        value=alert.value,
        active_since=alert.active_since,
        fired_at=alert.fired_at,
        resolved_at=alert.resolved_at,
        last_notified_at=alert.last_notified_at,
    )


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
    items = [_alert_out(a, quiet, now) for a in found]
    return AlertPage(items=items, next=next_cursor([i.id for i in items], limit))


class MatcherIn(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    value: str = Field(max_length=500)
    op: MatchOp = Field(MatchOp.EQUAL, description="=, !=, =~ (regex, whole value) or !~")


class SilenceIn(BaseModel):
    model_config = {
        "allow_inf_nan": False,
        "json_schema_extra": {
            "examples": [
                {
                    "matchers": [
                        {"name": "alertname", "value": "GPU memory nearly full"},
                        {"name": "pool", "value": "llama-8b"},
                    ],
                    "duration_seconds": 3600,
                    "comment": "planned model swap",
                }
            ]
        },
    }

    matchers: list[MatcherIn] = Field(min_length=1, max_length=20)
    starts_at: float | str | None = Field(None, description="Unix seconds or ISO-8601; default now")
    ends_at: float | str | None = Field(None, description="Unix seconds or ISO-8601; or give duration_seconds")
    duration_seconds: float | None = Field(None, gt=0, le=MAX_SILENCE_SECONDS)
    comment: str = Field("", max_length=1000)


class SilenceOut(BaseModel):
    id: str
    matchers: list[MatcherIn]
    starts_at: float
    ends_at: float
    active: bool
    created_by: str
    comment: str
    created_at: float


class SilencePage(BaseModel):
    items: list[SilenceOut]
    next: str | None = None


def _silence_out(silence: Silence, now: float) -> SilenceOut:
    return SilenceOut(
        id=silence.id,
        matchers=[MatcherIn(name=m.name, value=m.value, op=m.op) for m in silence.matchers],
        starts_at=silence.starts_at,
        ends_at=silence.ends_at,
        active=silence.active_at(now),
        created_by=silence.created_by,
        comment=silence.comment,
        created_at=silence.created_at,
    )


def _window(body: SilenceIn, now: float) -> tuple[float, float]:
    """(starts_at, ends_at) of a silence request; InvalidQuery (422) naming the field that is wrong."""
    starts = now if body.starts_at is None else parse_time("starts_at", str(body.starts_at))
    if (body.ends_at is None) == (body.duration_seconds is None):
        raise InvalidQuery("ends_at", "give ends_at or duration_seconds (one of them)")
    if body.duration_seconds is not None:
        return starts, starts + body.duration_seconds
    ends = parse_time("ends_at", str(body.ends_at))
    if ends <= max(starts, now):
        raise InvalidQuery("ends_at", "must be in the future and after starts_at")
    if ends - starts > MAX_SILENCE_SECONDS:
        raise InvalidQuery("ends_at", "a silence lasts at most a year")
    return starts, ends


def apply_silence_create(audit: Auditor, body: SilenceIn, *, now: float) -> Silence:
    """Silence by matchers, audited as ("silence", "create"): the API's POST and the dashboard's silence form. The
    silence is created by the acting token's name; a bad window is refused 422 naming ``starts_at`` or ``ends_at``."""
    try:
        starts, ends = _window(body, now)
    except InvalidQuery as exc:  # answered as the API's InvalidQuery handler does: 422 naming the field
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc), field=exc.field) from None
    try:
        matchers = [Matcher(m.name, m.value, m.op) for m in body.matchers]
        with audit.change("silence", "create") as change:
            silence = SilenceStore(change.engine).create(
                matchers, starts_at=starts, ends_at=ends, created_by=audit.caller.name, comment=body.comment, now=now
            )
            change.resource_id, change.after = silence.id, _silence_out(silence, now)
    except ValueError as exc:
        raise refused(exc) from None
    return silence


@router.post("/silences", status_code=status.HTTP_201_CREATED)
def create_silence(body: SilenceIn, services: ServicesDep, _caller: OperatorToken, audit: AuditorDep) -> SilenceOut:
    now = services.clock()
    return _silence_out(apply_silence_create(audit, body, now=now), now)


@router.get("/silences")
def list_silences(
    store: SilencesDep,
    services: ServicesDep,
    _token: ViewerToken,
    expired: Annotated[bool, Query(description="include expired silences")] = False,
) -> SilencePage:
    now = services.clock()
    found = store.list(active_at=None if expired else now)
    return SilencePage(items=[_silence_out(s, now) for s in found])


def apply_silence_expire(audit: Auditor, silence_id: str, *, now: float) -> None:
    """Expire a silence now, audited as ("silence", "expire"): the API's DELETE and the dashboard's expire button."""
    with audit.change("silence", "expire", silence_id) as change:
        store = SilenceStore(change.engine)
        before = next((s for s in store.list() if s.id == silence_id), None)
        if before is None or not store.expire(silence_id, now=now):
            raise not_found(f"no silence {silence_id!r}")
        after = next(s for s in store.list() if s.id == silence_id)
        change.before, change.after = _silence_out(before, now), _silence_out(after, now)


@router.delete("/silences/{silence_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def expire_silence(silence_id: str, services: ServicesDep, _token: OperatorToken, audit: AuditorDep) -> Response:
    """Expire the silence now: its alerts notify again (a firing one at the next evaluation)."""
    apply_silence_expire(audit, silence_id, now=services.clock())
    return Response(status_code=status.HTTP_204_NO_CONTENT)
