"""Tables the web layer owns: API tokens and dashboard sessions (both stored as SHA-256 digests, never in the
clear, so a read of the database gives no usable credential), and the audit log of every change (``web.changes``)."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Double, Index, Integer, String, Table

from collector.tables import metadata

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("role", String(16), nullable=False),
    Column("node_id", String(128), nullable=True),
    # a remote_write token's node-name globs (fnmatch), the only nodes it may write; null: any node but an agent's
    Column("node_scope", JSON, nullable=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
)

# One row per signed-in browser; every server sharing the database sees a logout at once.
dashboard_sessions = Table(
    "dashboard_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("token_id", String(32), nullable=False),
    Column("name", String(255), nullable=False),
    Column("role", String(16), nullable=False),
    Column("nonce", String(64), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False, index=True),
)

# One row per change made through the API or the dashboard (web.changes.audit writes and reads them).
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("ts", Double, nullable=False),
    Column("request_id", String(64), nullable=False),
    Column("actor_id", String(32), nullable=False),
    Column("actor_name", String(255), nullable=False),
    Column("actor_role", String(16), nullable=False),
    # pool | tenant | tenant_key | quota | token | alert_rule | silence | webhook
    Column("resource", String(32), nullable=False),
    Column("resource_id", String(255), nullable=False),
    Column("action", String(32), nullable=False),  # create | update | delete | scale | expire
    Column("before", JSON, nullable=True),
    Column("after", JSON, nullable=True),
    Index(None, "resource", "id"),
    Index(None, "actor_id", "id"),
    Index(None, "ts"),
)
