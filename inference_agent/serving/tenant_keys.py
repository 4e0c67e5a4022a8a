"""Tenant API keys: how they look, how they are hashed, and the desired state's ``tenant_keys`` that carries them.

A key is ``fp_tenant_<43 url-safe characters>``: 256 random bits, so a plain SHA-256 digest is a safe stored form
(nothing to brute-force, as ``web.tokens``) and fast enough for the serving front end to take per request. The
control plane keeps only digests and sends agents only digests; the clear key is shown once, when it is created.

This module is the one seam both sides import: the control plane builds ``TenantKeyHashes`` into each ingest answer,
the agent parses it back; it needs nothing but pydantic.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

TENANT_KEY_PREFIX = "fp_tenant_"
SHOWN_PREFIX_CHARS = len(TENANT_KEY_PREFIX) + 6  # what a listing shows to tell keys apart: "fp_tenant_Ab3xYz"
MAX_KEYS_PER_TENANT = 16  # rotation needs 2; 16 leaves room for one per client without sizing anything by a caller
MAX_KEYS_PER_ANSWER = 100_000  # 6,250 tenants at the per-tenant cap; ~9 MB, the agent refuses anything larger

Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
TenantName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]  # collector.wire.NAME_PATTERN


def new_tenant_key() -> str:
    return f"{TENANT_KEY_PREFIX}{secrets.token_urlsafe(32)}"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class TenantKeyHashes(BaseModel):
    """``desired["tenant_keys"]``: the digest of every live key → the tenant it names."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    tenant_keys: dict[Digest, TenantName] = Field(default_factory=dict, max_length=MAX_KEYS_PER_ANSWER)

    @classmethod
    def from_desired(cls, desired: Mapping[str, Any]) -> TenantKeyHashes:
        """The keys carried by an ingest answer's ``desired`` (none when absent); pydantic's ValueError names a bad
        field."""
        return cls.model_validate({"tenant_keys": desired.get("tenant_keys") or {}})

    def tenant_of(self, key: str) -> str | None:
        return self.tenant_keys.get(key_digest(key))
