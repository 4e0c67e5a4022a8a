"""``/api/v1/webhooks``: admins add and remove notification targets (signed webhooks, Alertmanager sinks); viewers
list them and read each one's delivery log. URLs are answered redacted and secrets never; the audit log keeps each
addition and removal the same way (``web.changes.webhooks``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response, status

from alerting.outbox import delivery_log
from alerting.webhooks import WebhookStore
from web.auth import AdminToken, ServicesDep, ViewerToken
from web.changes.audit import AuditorDep
from web.changes.webhooks import apply_webhook_create, apply_webhook_delete
from web.errors import ERROR_RESPONSES, error_responses, not_found
from web.pagination import Cursor, PageLimit, before_id, next_cursor
from web.schemas.webhooks import DeliveryOut, DeliveryPage, WebhookIn, WebhookOut, WebhookPage, webhook_out

router = APIRouter(tags=["alerting"], responses=ERROR_RESPONSES)


def _store(services: ServicesDep) -> WebhookStore:
    return WebhookStore(services.engine)


StoreDep = Annotated[WebhookStore, Depends(_store)]


@router.get("/webhooks")
def list_webhooks(store: StoreDep, _token: ViewerToken) -> WebhookPage:
    return WebhookPage(items=[webhook_out(h) for h in store.list()])


@router.post("/webhooks", status_code=status.HTTP_201_CREATED)
def create_webhook(body: WebhookIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep) -> WebhookOut:
    return webhook_out(apply_webhook_create(audit, body, services))


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
