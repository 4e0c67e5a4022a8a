"""The notification targets' shapes: URLs are answered redacted and secrets never; and their delivery log."""

from __future__ import annotations

from pydantic import BaseModel, Field

from alerting.webhooks import MIN_SECRET_LENGTH, TargetKind, Webhook


class WebhookIn(BaseModel):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "url": "https://hooks.example.com/fleetpilot",
                    "secret": "a-long-random-signing-secret-of-32+",
                    "name": "oncall",
                }
            ]
        }
    }

    url: str = Field(max_length=2000, description="http(s) URL; for an Alertmanager, its base URL")
    secret: str | None = Field(
        None,
        min_length=MIN_SECRET_LENGTH,
        max_length=500,
        description="HMAC-SHA256 key of X-Fleetpilot-Signature (required for kind webhook)",
    )
    kind: TargetKind = TargetKind.WEBHOOK
    name: str = Field("", max_length=200, description="the payload's receiver")


class WebhookOut(BaseModel):
    id: str
    name: str
    kind: TargetKind
    url: str = Field(description="credentials and query values shown as ***")
    has_secret: bool
    created_at: float


class WebhookPage(BaseModel):
    items: list[WebhookOut]
    next: str | None = None


class DeliveryOut(BaseModel):
    id: int
    notification_id: int
    delivery_id: str
    attempt: int
    ts: float
    outcome: str
    status_code: int | None
    error: str | None
    duration_seconds: float


class DeliveryPage(BaseModel):
    items: list[DeliveryOut]
    next: str | None


def webhook_out(hook: Webhook) -> WebhookOut:
    return WebhookOut(
        id=hook.id,
        name=hook.name,
        kind=hook.kind,
        url=hook.shown_url,
        has_secret=bool(hook.secret),
        created_at=hook.created_at,
    )
