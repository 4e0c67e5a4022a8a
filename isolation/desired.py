"""The tenants part of what the agents should enforce: each tenant's SLO class and admission limits per pool.

The shape is the one ``inference_agent.serving.admission.QuotaBook.from_desired`` reads::

    {"tenants": {"acme": {"slo_class": "latency_critical",
                          "quotas": {"chat": {"rate_rps": 5.0, "burst": 5.0, "max_concurrency": 4}}}}}

A field a quota leaves unset is left out, so the agent keeps its default (64 requests in flight); ``burst`` is one
second's worth of the rate and at least one request (0.5 rps → 1, 20 rps → 20).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from isolation.tenants import QuotaSpec, TenantStore


def tenants_desired(engine: Engine) -> dict[str, Any] | None:
    """``{"tenants": {...}}`` for the ingest answer, or None while no tenant exists (the agents keep defaults)."""
    found = TenantStore(engine).list()
    if not found:
        return None
    return {
        "tenants": {
            t.name: {"slo_class": t.slo_class.value, "quotas": {pool: _admission(q) for pool, q in t.quotas.items()}}
            for t in found
        }
    }


def _admission(quota: QuotaSpec) -> dict[str, Any]:
    body: dict[str, Any] = {"rate_rps": quota.rate_rps}
    if quota.rate_rps is not None:
        body["burst"] = max(1.0, quota.rate_rps)
    if quota.max_concurrency is not None:
        body["max_concurrency"] = quota.max_concurrency
    return body
