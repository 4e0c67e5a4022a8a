"""``/api/v1/webhooks``: admins add and remove notification targets (signed webhooks, Alertmanager sinks); viewers
list them and read each one's delivery log. URLs are answered redacted and secrets never; the audit log keeps each
addition and removal the same way."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response, status
from pydantic import BaseModel, Field

from alerting.outbox import delivery_log
from alerting.target_address import AddressPolicy
from alerting.webhooks import MIN_SECRET_LENGTH, TargetKind, Webhook, WebhookStore, validate_url
from web.audit import Auditor, AuditorDep
from web.auth import AdminToken, ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, error_responses, not_found, refused
from web.pagination import Cursor, PageLimit, before_id, next_cursor
from web.services import AppServices

router = APIRouter(tags=["alerting"], responses=ERROR_RESPONSES)


def _store(services: ServicesDep) -> WebhookStore:
    return WebhookStore(services.engine)


StoreDep = Annotated[WebhookStore, Depends(_store)]


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


def _out(hook: Webhook) -> WebhookOut:
    return WebhookOut(
        id=hook.id,
        name=hook.name,
        kind=hook.kind,
        url=hook.shown_url,
        has_secret=bool(hook.secret),
        created_at=hook.created_at,
    )


@router.get("/webhooks")
def list_webhooks(store: StoreDep, _token: ViewerToken) -> WebhookPage:
    return WebhookPage(items=[_out(h) for h in store.list()])


def apply_webhook_create(audit: Auditor, body: WebhookIn, services: AppServices) -> Webhook:
    """Add a notification target, audited as ("webhook", "create") with its URL redacted and its secret never: the
    API's POST and the dashboard's webhook form. A URL outside ``webhook_allowed_hosts`` (when set), or whose host
    resolves to an inside address outside ``webhook_allowed_networks``, is refused 422 naming ``url``."""
    settings, now = services.settings, services.clock()
    addresses = AddressPolicy.allowing(settings.webhook_allowed_networks)  # CIDRs checked at the server's start
    try:
        url = validate_url(body.url, settings.webhook_allowed_hosts, addresses)
        with audit.change("webhook", "create") as change:
            hook = WebhookStore(change.engine).create(url, body.secret, kind=body.kind, name=body.name, now=now)
            change.resource_id, change.after = hook.id, _out(hook)
    except ValueError as exc:
        raise refused(exc) from None
    return hook


@router.post("/webhooks", status_code=status.HTTP_201_CREATED)
def create_webhook(body: WebhookIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep) -> WebhookOut:
    return _out(apply_webhook_create(audit, body, services))


def apply_webhook_delete(audit: Auditor, webhook_id: str) -> None:
    """Remove a target, audited as ("webhook", "delete"): the API's DELETE and the dashboard's remove button."""
    with audit.change("webhook", "delete", webhook_id) as change:
        store = WebhookStore(change.engine)
        before = store.get(webhook_id)
        if before is None:
            raise not_found(f"no webhook {webhook_id!r}")
        store.delete(webhook_id)
        change.before = _out(before)


@router.delete("/webhooks/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def delete_webhook(webhook_id: str, _token: AdminToken, audit: AuditorDep) -> Response:
    """Notifications not yet delivered to it are dropped."""
    apply_webhook_delete(audit, webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/webhooks/{webhook_id}/deliveries", responses=error_responses(404))
def list_deliveries(
    webhook_id: str,
    store: StoreDep,
    services: ServicesDep,
    _token: ViewerToken,
    limit: PageLimit = 100,
    cursor: Cursor = None,
) -> DeliveryPage:
    """Every attempt, newest first: its delivery id (the same on every retry), status code or error, duration."""
    if store.get(webhook_id) is None:
        raise not_found(f"no webhook {webhook_id!r}")
    records = delivery_log(services.engine, webhook_id, before=before_id(cursor), limit=limit)
    items = [DeliveryOut(**vars(r)) for r in records]
    return DeliveryPage(items=items, next=next_cursor([i.id for i in items], limit))
