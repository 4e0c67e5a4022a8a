"""Notification targets: signed webhooks and Alertmanager sinks, with their URLs checked and never shown whole.

A URL must parse with httpx (the parser that sends it), be ``http`` or ``https`` with a host, that host must be on the
allow-list when one is configured (``webhook_allowed_hosts``: exact names, or ``*.example.com`` for its subdomains),
and every address it resolves to must pass :class:`~alerting.target_address.AddressPolicy` (checked again at each
send, since DNS may change). Credentials in a URL
(``https://user:pass@host``) and query values are stored, since sending needs them, but every log line and API
answer shows the URL through :func:`redact`. The secret is never answered.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
from sqlalchemy import Engine, RowMapping, delete, insert, select, update

from alerting.tables import notifications, webhooks
from alerting.target_address import AddressPolicy, AddressRefused
from wire.errors import FieldError

MIN_SECRET_LENGTH = 16


class TargetKind(StrEnum):
    WEBHOOK = "webhook"  # an Alertmanager-compatible webhook payload, HMAC-signed
    ALERTMANAGER = "alertmanager"  # a real Alertmanager: POST {url}/api/v2/alerts


@dataclass(frozen=True)
class Webhook:
    id: str
    name: str
    kind: TargetKind
    url: str
    secret: str | None
    created_at: float

    @property
    def shown_url(self) -> str:
        return redact(self.url)


def validate_url(url: str, allowed_hosts: Sequence[str], addresses: AddressPolicy) -> str:
    """The URL if it may be a target; ValueError naming ``url`` otherwise (the message never repeats credentials).
    httpx parses it, as it will when sending: ``http://0177.0.0.1/`` passes ``urlsplit`` but httpx refuses it."""
    try:
        parsed = httpx.URL(url.strip())
    except httpx.InvalidURL as exc:
        raise FieldError("url", f"{exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise FieldError("url", f"the scheme must be http or https, not {parsed.scheme or 'none'!r}")
    host = parsed.host.lower()
    if not host:
        raise FieldError("url", "no host")
    if allowed_hosts and not any(host_allowed(host, pattern) for pattern in allowed_hosts):
        raise FieldError("url", f"host {host!r} is not on the allow-list (webhook_allowed_hosts)")
    try:
        addresses.checked_addresses(parsed.raw_host.decode("ascii"), parsed.port or _DEFAULT_PORTS[parsed.scheme])
    except AddressRefused as exc:
        raise FieldError("url", f"host {host!r} resolves to {exc}") from None
    except OSError:
        pass  # a name that does not resolve yet is no address to refuse; each send resolves and checks it again
    return url.strip()


_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_allowed(host: str, pattern: str) -> bool:
    """``alerts.example.com`` matches ``alerts.example.com`` and ``*.example.com``; the bare domain does not."""
    pattern = pattern.lower().strip()
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def redact(url: str) -> str:
    """``https://u:p@h/x?token=abc`` → ``https://***@h/x?token=***``: what logs and answers show."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = urlencode([(k, "***") for k, _v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _webhook(row: RowMapping) -> Webhook:
    return Webhook(row["id"], row["name"], TargetKind(row["kind"]), row["url"], row["secret"], row["created_at"])


class WebhookStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, url: str, secret: str | None, *, kind: TargetKind, name: str, now: float) -> Webhook:
        if kind is TargetKind.WEBHOOK and (secret is None or len(secret) < MIN_SECRET_LENGTH):
            raise FieldError("secret", f"a webhook needs a secret of at least {MIN_SECRET_LENGTH} characters to sign")
        hook_id = secrets.token_hex(8)
        hook = Webhook(hook_id, name or f"{kind.value}-{hook_id}", kind, url, secret, now)
        with self.engine.begin() as conn:
            conn.execute(
                insert(webhooks).values(
                    id=hook.id, name=hook.name, kind=kind.value, url=url, secret=secret, created_at=now
                )
            )
        return hook

    def list(self) -> list[Webhook]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(webhooks).order_by(webhooks.c.created_at, webhooks.c.id))
            return [_webhook(r._mapping) for r in rows]

    def get(self, hook_id: str) -> Webhook | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(webhooks).where(webhooks.c.id == hook_id)).first()
        return None if row is None else _webhook(row._mapping)

    def delete(self, hook_id: str) -> bool:
        """Remove the target; its notifications not yet delivered are dropped (kept, marked ``dropped``)."""
        with self.engine.begin() as conn:
            gone = conn.execute(delete(webhooks).where(webhooks.c.id == hook_id)).rowcount == 1
            if gone:
                conn.execute(
                    update(notifications)
                    .where(notifications.c.webhook_id == hook_id, notifications.c.status == "pending")
                    .values(status="dropped")
                )
        return gone
