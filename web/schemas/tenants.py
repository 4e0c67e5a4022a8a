"""The tenants' API shapes: a tenant's SLO class and its quotas by pool, as they are created, edited and answered."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from pydantic import BaseModel, Field

from isolation.tenants import MAX_CONCURRENCY, MAX_GPU_MEMORY_MIB, Tenant
from wire.control import NAME_PATTERN, SloClass

Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class Quota(BaseModel):
    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    gpu_memory_mib: int | None = Field(
        None, ge=1, le=MAX_GPU_MEMORY_MIB, description="GPU memory each replica pins; rounded up to 128 MiB (MPS)"
    )
    active_thread_percentage: int | None = Field(None, ge=1, le=100, description="share of the GPU's SMs (MPS)")
    max_concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, description="requests in flight per replica")
    rate_rps: float | None = Field(None, gt=0, description="requests per second (a token bucket)")
    tokens_per_second: float | None = Field(None, gt=0, description="generated tokens per second")


class QuotaPut(Quota):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {"gpu_memory_mib": 16384, "active_thread_percentage": 40, "max_concurrency": 8, "rate_rps": 50}
            ]
        }
    }

    version: int | None = Field(None, description="the tenant version this edit is based on; 409 if it moved on")


class TenantIn(BaseModel):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "name": "search",
                    "slo_class": "latency_critical",
                    "quotas": {"llama-8b": {"gpu_memory_mib": 16384, "active_thread_percentage": 40, "rate_rps": 50}},
                }
            ]
        }
    }

    name: Name
    slo_class: SloClass = SloClass.STANDARD
    quotas: dict[Name, Quota] = Field(default_factory=dict, description="by pool")


class TenantPatch(BaseModel):
    model_config = {"json_schema_extra": {"examples": [{"slo_class": "batch"}]}}

    slo_class: SloClass
    version: int | None = Field(None, description="the version this edit is based on; 409 if the tenant moved on")


class TenantOut(TenantIn):
    version: int
    created_at: float
    updated_at: float


class TenantPage(BaseModel):
    items: list[TenantOut]
    next: str | None = None


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        name=tenant.name,
        slo_class=tenant.slo_class,
        quotas={pool: Quota(**asdict(q)) for pool, q in sorted(tenant.quotas.items())},
        version=tenant.version,
        created_at=tenant.created_at,
        updated_at=tenant.updated_at,
    )
