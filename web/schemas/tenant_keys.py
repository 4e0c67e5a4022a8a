"""The tenant keys' shapes: a key is answered by its name and first characters, its clear text only once."""

from __future__ import annotations

from pydantic import BaseModel, Field

from isolation.tenant_keys import TenantKey


class TenantKeyIn(BaseModel):
    model_config = {"json_schema_extra": {"examples": [{"name": "checkout-service"}]}}

    name: str = Field("", max_length=255, description="a label to tell keys apart (default key-<id>)")


class TenantKeyOut(BaseModel):
    id: str
    tenant: str
    name: str
    prefix: str = Field(description="the key's first characters, to recognise it; never the whole key")
    created_at: float


class NewTenantKeyOut(TenantKeyOut):
    key: str = Field(description="the key itself, shown this once: send it as Authorization: Bearer <key>")


class TenantKeyPage(BaseModel):
    items: list[TenantKeyOut]
    next: str | None = None


def tenant_key_out(key: TenantKey) -> TenantKeyOut:
    return TenantKeyOut(id=key.id, tenant=key.tenant, name=key.name, prefix=key.prefix, created_at=key.created_at)
