"""Admission control per tenant and pool: a token bucket (rate) and a concurrency cap, and the tenant's SLO class.

Pure: time is passed in, state is a value. The quotas come from the control plane's ``desired`` state (the isolation
issue fills them); until it says anything every tenant is ``standard`` with an unlimited rate and 64 concurrent
requests per pool. Shape read from ``desired["tenants"]`` (absent fields keep their defaults)::

    {"tenants": {"acme": {"slo_class": "latency_critical",
                          "quotas": {"text-small": {"rate_rps": 5.0, "burst": 10, "max_concurrency": 4}}}}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from inference_agent.engine.api import Priority

DEFAULT_MAX_CONCURRENCY = 64


class SloClass(StrEnum):
    LATENCY_CRITICAL = "latency_critical"
    STANDARD = "standard"
    BATCH = "batch"

    @property
    def priority(self) -> Priority:
        return {
            SloClass.LATENCY_CRITICAL: Priority.LATENCY_CRITICAL,
            SloClass.STANDARD: Priority.STANDARD,
            SloClass.BATCH: Priority.BATCH,
        }[self]


@dataclass(frozen=True)
class Quota:
    """One tenant's limits on one pool; ``rate_rps=None`` means no rate limit."""

    rate_rps: float | None = None
    burst: float = 1.0
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY


@dataclass(frozen=True)
class TenantPolicy:
    slo_class: SloClass = SloClass.STANDARD
    quotas: Mapping[str, Quota] = field(default_factory=dict)  # by pool

    def quota(self, pool: str) -> Quota:
        return self.quotas.get(pool, Quota())


@dataclass(frozen=True)
class QuotaBook:
    """Every tenant's policy; a tenant not named gets the defaults."""

    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)

    def policy(self, tenant: str) -> TenantPolicy:
        return self.tenants.get(tenant, TenantPolicy())

    @classmethod
    def from_desired(cls, desired: Mapping[str, Any]) -> QuotaBook:
        """The book carried by ``desired["tenants"]``; raises ValueError naming the offending field."""
        tenants: dict[str, TenantPolicy] = {}
        for name, body in (desired.get("tenants") or {}).items():
            where = f"tenants.{name}"
            if not isinstance(body, Mapping):
                raise ValueError(f"{where}: expected an object")
            try:
                slo = SloClass(body.get("slo_class", SloClass.STANDARD))
            except ValueError:
                raise ValueError(f"{where}.slo_class: one of {[s.value for s in SloClass]}") from None
            quotas = {pool: _quota(f"{where}.quotas.{pool}", q) for pool, q in (body.get("quotas") or {}).items()}
            tenants[name] = TenantPolicy(slo, quotas)
        return cls(tenants)


def _quota(where: str, body: Any) -> Quota:
    if not isinstance(body, Mapping):
        raise ValueError(f"{where}: expected an object")
    rate = body.get("rate_rps")
    if rate is not None and (not isinstance(rate, int | float) or not rate > 0):
        raise ValueError(f"{where}.rate_rps: a positive number or null")
    burst = body.get("burst", max(1.0, float(rate)) if rate is not None else 1.0)
    if not isinstance(burst, int | float) or burst < 1:
        raise ValueError(f"{where}.burst: a number >= 1")
    concurrency = body.get("max_concurrency", DEFAULT_MAX_CONCURRENCY)
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"{where}.max_concurrency: an integer >= 1")
    return Quota(float(rate) if rate is not None else None, float(burst), concurrency)


@dataclass(frozen=True)
class Bucket:
    """A token bucket's state: ``tokens`` as of ``at`` (monotonic seconds)."""

    tokens: float
    at: float


def refill(bucket: Bucket | None, quota: Quota, now: float) -> Bucket:
    """The bucket at ``now``: a new bucket starts full; tokens accrue at ``rate_rps`` up to ``burst``."""
    if bucket is None or quota.rate_rps is None:
        return Bucket(quota.burst, now)
    gained = max(0.0, now - bucket.at) * quota.rate_rps
    return Bucket(min(quota.burst, bucket.tokens + gained), now)


def wait_for_token_s(bucket: Bucket, quota: Quota) -> float:
    """Seconds until the bucket holds one whole token (0 when it does): 0.25 tokens at 0.5 rps → 1.5 s."""
    if quota.rate_rps is None or bucket.tokens >= 1.0:
        return 0.0
    return (1.0 - bucket.tokens) / quota.rate_rps


class Verdict(StrEnum):
    ADMIT = "admit"
    RATE_LIMITED = "rate_limited"
    CONCURRENCY_LIMITED = "concurrency_limited"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    priority: Priority
    retry_after_s: float = 0.0

    @property
    def retry_after_header(self) -> str:
        """Whole seconds for ``Retry-After``, at least 1: 1.5 s → "2"."""
        return str(max(1, math.ceil(self.retry_after_s)))


@dataclass(frozen=True)
class TenantState:
    """What admission remembers of one (tenant, pool): its bucket and its requests in progress."""

    bucket: Bucket | None = None
    in_flight: int = 0


def admit(state: TenantState, policy: TenantPolicy, pool: str, now: float) -> tuple[Decision, TenantState]:
    """Admit one request (taking a token and a concurrency slot) or say why not and when to retry."""
    quota = policy.quota(pool)
    priority = policy.slo_class.priority
    bucket = refill(state.bucket, quota, now)
    if state.in_flight >= quota.max_concurrency:
        # no clock says when a slot frees; a second is the usual client back-off
        return Decision(Verdict.CONCURRENCY_LIMITED, priority, 1.0), replace(state, bucket=bucket)
    wait = wait_for_token_s(bucket, quota)
    if wait > 0:
        return Decision(Verdict.RATE_LIMITED, priority, wait), replace(state, bucket=bucket)
    taken = bucket if quota.rate_rps is None else Bucket(bucket.tokens - 1.0, now)
    return Decision(Verdict.ADMIT, priority), TenantState(taken, state.in_flight + 1)


def release(state: TenantState) -> TenantState:
    """A request admitted earlier has finished (answered, failed or refused downstream)."""
    return replace(state, in_flight=max(0, state.in_flight - 1))
