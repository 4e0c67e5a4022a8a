"""Notification target changes (admin): add a signed webhook or an Alertmanager sink, and remove one. The audit log
keeps each with its URL redacted and its secret never."""

from __future__ import annotations

from alerting.target_address import AddressPolicy
from alerting.webhooks import Webhook, WebhookStore, validate_url
from web.changes.audit import Auditor
from web.errors import not_found, refusals
from web.schemas.webhooks import WebhookIn, webhook_out
from web.services import AppServices


def apply_webhook_create(audit: Auditor, body: WebhookIn, services: AppServices) -> Webhook:
    """Add a notification target, audited as ("webhook", "create") with its URL redacted and its secret never: the
    API's POST and the dashboard's webhook form. A URL outside ``webhook_allowed_hosts`` (when set), or whose host
    resolves to an inside address outside ``webhook_allowed_networks``, is refused 422 naming ``url``."""
    settings, now = services.settings, services.clock()
    addresses = AddressPolicy.allowing(settings.webhook_allowed_networks)  # CIDRs checked at the server's start
    with refusals():
        url = validate_url(body.url, settings.webhook_allowed_hosts, addresses)
    with audit.change("webhook", "create") as change:
        hook = WebhookStore(change.engine).create(url, body.secret, kind=body.kind, name=body.name, now=now)
        change.resource_id, change.after = hook.id, webhook_out(hook)
    return hook


def apply_webhook_delete(audit: Auditor, webhook_id: str) -> None:
    """Remove a target, audited as ("webhook", "delete"): the API's DELETE and the dashboard's remove button."""
    with audit.change("webhook", "delete", webhook_id) as change:
        store = WebhookStore(change.engine)
        before = store.get(webhook_id)
        if before is None:
            raise not_found(f"no webhook {webhook_id!r}")
        store.delete(webhook_id)
        change.before = webhook_out(before)
