"""Silence changes (operator): silence alerts by label matchers for a window, and expire a silence early."""

from __future__ import annotations

from fastapi import status

from alerting.alert_store import SilenceStore
from alerting.silences import Matcher, Silence
from collector.errors import InvalidQuery
from web.changes.audit import Auditor
from web.errors import ApiError, not_found, refusals
from web.schemas.alerts import MAX_SILENCE_SECONDS, SilenceIn, silence_out
from web.timeparam import parse_time


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
    with refusals():
        matchers = [Matcher(m.name, m.value, m.op) for m in body.matchers]
    with audit.change("silence", "create") as change:
        silence = SilenceStore(change.engine).create(
            matchers, starts_at=starts, ends_at=ends, created_by=audit.caller.name, comment=body.comment, now=now
        )
        change.resource_id, change.after = silence.id, silence_out(silence, now)
    return silence


def apply_silence_expire(audit: Auditor, silence_id: str, *, now: float) -> None:
    """Expire a silence now, audited as ("silence", "expire"): the API's DELETE and the dashboard's expire button."""
    with audit.change("silence", "expire", silence_id) as change:
        store = SilenceStore(change.engine)
        before = next((s for s in store.list() if s.id == silence_id), None)
        if before is None or not store.expire(silence_id, now=now):
            raise not_found(f"no silence {silence_id!r}")
        after = next(s for s in store.list() if s.id == silence_id)
        change.before, change.after = silence_out(before, now), silence_out(after, now)
