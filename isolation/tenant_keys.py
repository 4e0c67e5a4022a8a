"""Tenant API keys: created (the clear key answered once), listed without secrets, revoked; stored as digests.

The serving front ends learn the digests from the desired state (``isolation.desired``): a change of keys publishes
the tenants part at once, so a revoked key stops working on a node at its next push (1 s with the defaults). The
store holds no more keys than one desired state carries (``MAX_TENANT_KEYS``): past it a new key is refused, since
agents refuse a state with more, whole.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Row, delete, func, insert, select

from isolation.tenants import TenantNotFound, tenant_api_keys, tenants
from wire.control import MAX_KEYS_PER_TENANT, MAX_TENANT_KEYS, SHOWN_PREFIX_CHARS, key_digest, new_tenant_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TenantKey:
    """A key as it may be shown: never its secret, only its first characters."""

    id: str
    tenant: str
    name: str
    prefix: str
    created_at: float


class TooManyKeys(ValueError):
    pass


def _key(row: Row[Any]) -> TenantKey:
    m = row._mapping
    return TenantKey(m["id"], m["tenant"], m["name"], m["prefix"], m["created_at"])


def _require_tenant(conn: Connection, tenant: str) -> None:
    if conn.execute(select(tenants.c.name).where(tenants.c.name == tenant)).first() is None:
        raise TenantNotFound(f"no tenant {tenant!r}")


class TenantKeyStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, tenant: str, *, now: float, name: str = "") -> tuple[TenantKey, str]:
        """Store a new key of ``tenant`` and answer it with its clear text (shown once, never stored)."""
        clear = new_tenant_key()
        key_id = secrets.token_hex(6)
        key = TenantKey(key_id, tenant, name or f"key-{key_id}", clear[:SHOWN_PREFIX_CHARS], now)
        with self.engine.begin() as conn:
            _require_tenant(conn, tenant)
            _check_room(conn, tenant)
            values = {"id": key.id, "tenant": tenant, "name": key.name, "prefix": key.prefix, "created_at": now}
            conn.execute(insert(tenant_api_keys).values(**values, key_hash=key_digest(clear)))
        return key, clear

    def list(self, tenant: str) -> list[TenantKey]:
        with self.engine.connect() as conn:
            _require_tenant(conn, tenant)
            rows = conn.execute(
                select(tenant_api_keys)
                .where(tenant_api_keys.c.tenant == tenant)
                .order_by(tenant_api_keys.c.created_at, tenant_api_keys.c.id)
            )
            return [_key(r) for r in rows]

    def get(self, tenant: str, key_id: str) -> TenantKey | None:
        with self.engine.connect() as conn:
            where = (tenant_api_keys.c.tenant == tenant, tenant_api_keys.c.id == key_id)
            row = conn.execute(select(tenant_api_keys).where(*where)).first()
            return None if row is None else _key(row)

    def delete(self, tenant: str, key_id: str) -> bool:
        """Revoke the key; False when the tenant has no such key."""
        with self.engine.begin() as conn:
            where = (tenant_api_keys.c.tenant == tenant, tenant_api_keys.c.id == key_id)
            return conn.execute(delete(tenant_api_keys).where(*where)).rowcount == 1

    def digests(self) -> Mapping[str, str]:
        """Every live key's digest → its tenant: what the agents check keys against. At most ``MAX_TENANT_KEYS``,
        the oldest: a desired state carrying more is refused whole by every agent. Only keys created at once past
        the bound (two transactions each seeing room for one) are left out, and said so in the log."""
        t = tenant_api_keys.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.key_hash, t.tenant).order_by(t.created_at, t.id).limit(MAX_TENANT_KEYS + 1)
            ).all()
        if len(rows) > MAX_TENANT_KEYS:
            log.error("tenant keys: more than %d stored; the newest are not sent to the agents", MAX_TENANT_KEYS)
        return {r.key_hash: r.tenant for r in rows[:MAX_TENANT_KEYS]}


def _check_room(conn: Connection, tenant: str) -> None:
    """TooManyKeys when ``tenant`` holds ``MAX_KEYS_PER_TENANT`` keys, or the fleet ``MAX_TENANT_KEYS``: what one
    desired state carries to every agent (a state with more is refused whole)."""
    t = tenant_api_keys.c
    held = conn.execute(select(func.count()).select_from(tenant_api_keys).where(t.tenant == tenant)).scalar_one()
    if held >= MAX_KEYS_PER_TENANT:
        raise TooManyKeys(f"tenant {tenant!r} has {held} keys, the most it may hold: revoke one first")
    in_all = conn.execute(select(func.count()).select_from(tenant_api_keys)).scalar_one()
    if in_all >= MAX_TENANT_KEYS:
        raise TooManyKeys(
            f"the tenants hold {in_all} keys in all, the most a node's desired state carries "
            f"(MAX_TENANT_KEYS = {MAX_TENANT_KEYS}): revoke unused keys first"
        )
