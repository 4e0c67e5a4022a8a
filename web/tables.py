"""Tables the web layer owns: API tokens (stored as SHA-256 digests, never in the clear)."""

from __future__ import annotations

from sqlalchemy import Column, Double, String, Table

from collector.tables import metadata

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("role", String(16), nullable=False),
    Column("node_id", String(128), nullable=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
)
