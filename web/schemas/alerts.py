"""The alerts' and silences' shapes: an alert as it is answered (silenced or not), a silence as it is asked for
(label matchers, a window) and answered."""

from __future__ import annotations

from pydantic import BaseModel, Field

from alerting.lifecycle import Alert, AlertStatus
from alerting.silences import MatchOp, Silence, silenced

MAX_SILENCE_SECONDS = 366 * 86400.0


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


def alert_out(alert: Alert, quiet: list[Silence], now: float) -> AlertOut:
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


def silence_out(silence: Silence, now: float) -> SilenceOut:
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
