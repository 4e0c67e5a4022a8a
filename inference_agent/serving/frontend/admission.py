"""Admission control per tenant and pool: a token bucket of requests (rate), one of generation tokens (tokens/s),
a concurrency cap, and the tenant's SLO class.

Pure: time is passed in, state is a value. The quotas come from the control plane's ``desired`` state (the isolation
enforcer fills them); until it says anything every tenant is ``standard`` with an unlimited rate and 64 concurrent
requests per pool — except ``default``, the tenant of every caller without a key, whose callers all share
``ANONYMOUS_QUOTA`` on each pool unless the control plane gives ``default`` quotas of its own. Read from the
desired state's ``tenants`` (``wire.control.TenantDesired``; absent fields keep their defaults)::

    {"tenants": {"acme": {"slo_class": "latency_critical",
                          "quotas": {"text-small": {"rate_rps": 5.0, "burst": 10, "max_concurrency": 4,
                                                    "tokens_per_second": 800.0, "token_burst": 800.0,
                                                    "kv_share": 0.3}}}}}

A request's token cost is what it may make the replica process: its prompt, and its ``max_tokens`` for each sequence
the engine generates (``n``, ``best_of``; ``model_routes.py``). It is admitted
once the bucket holds that cost, or the whole burst when it costs more, and the whole cost is taken — the bucket may
go below zero, so the tenant's long-run tokens/s holds: 700 tokens at 200 tokens/s with a burst of 200 leaves −500,
and the next request waits (500 + its cost, at most 200) / 200 s.

A (tenant, pool) state that admits as a fresh one would (nothing in flight, buckets refilled) is idle and can be
dropped (``prune``): what the front end remembers is bounded by its busy tenants, not by every name it ever saw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from inference_agent.torch_runtime.api import Priority
from wire.control import DesiredState, QuotaDesired, SloClass

DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_TENANT = "default"  # every caller without a key, and every name the control plane does not know


# The engine's scheduling priority of each SLO class (wire.control.SloClass, the control plane's word for it).
PRIORITY: Mapping[SloClass, Priority] = {
    SloClass.LATENCY_CRITICAL: Priority.LATENCY_CRITICAL,
    SloClass.STANDARD: Priority.STANDARD,
    SloClass.BATCH: Priority.BATCH,
}


@dataclass(frozen=True)
class Quota:
    """One tenant's limits on one pool; ``rate_rps=None`` means no rate limit."""

    rate_rps: float | None = None
    burst: float = 1.0
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    tokens_per_second: float | None = None
    token_burst: float = 1.0
    kv_share: float | None = None  # of each replica's KV blocks, when they are contended


# What all anonymous callers of a pool share, together: 20 requests/s (bursts of 40), 8 in flight and 2,000 prompt
# and generated tokens/s — a trickle for trying the API out, not a way around a tenant's quota (with 1,000 clients
# sharing it, each gets 0.02 requests/s).
ANONYMOUS_QUOTA = Quota(rate_rps=20.0, burst=40.0, max_concurrency=8, tokens_per_second=2000.0, token_burst=4000.0)


@dataclass(frozen=True)
class TenantPolicy:
    slo_class: SloClass = SloClass.STANDARD
    quotas: Mapping[str, Quota] = field(default_factory=dict)  # by pool
    fallback: Quota = Quota()  # on a pool without a quota of its own

    def quota(self, pool: str) -> Quota:
        return self.quotas.get(pool, self.fallback)


@dataclass(frozen=True)
class QuotaBook:
    """Every tenant's policy; a tenant not named gets the defaults, ``default`` the anonymous quota on each pool."""

    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)
    anonymous: Quota = ANONYMOUS_QUOTA

    def policy(self, tenant: str) -> TenantPolicy:
        found = self.tenants.get(tenant)
        if tenant == DEFAULT_TENANT:
            return replace(found or TenantPolicy(), fallback=self.anonymous)
        return found or TenantPolicy()

    @classmethod
    def from_desired(cls, desired: DesiredState, anonymous: Quota = ANONYMOUS_QUOTA) -> QuotaBook:
        """The book carried by ``desired.tenants`` (validated where it was parsed, ``wire.control``)."""
        tenants = {
            name: TenantPolicy(body.slo_class, {pool: quota_of(q) for pool, q in body.quotas.items()})
            for name, body in desired.tenants.items()
        }
        return cls(tenants, anonymous)


def quota_of(desired: QuotaDesired) -> Quota:
    """A quota as the control plane sends it, each field it leaves out at the agent's default: a burst of one
    second's rate (at least 1), ``DEFAULT_MAX_CONCURRENCY``, no rate, no tokens/s, no KV share."""
    rate, tokens = desired.rate_rps, desired.tokens_per_second
    return Quota(
        rate_rps=rate,
        burst=desired.burst if desired.burst is not None else max(1.0, rate or 1.0),
        max_concurrency=desired.max_concurrency if desired.max_concurrency is not None else DEFAULT_MAX_CONCURRENCY,
        tokens_per_second=tokens,
        token_burst=desired.token_burst if desired.token_burst is not None else max(1.0, tokens or 1.0),
        kv_share=desired.kv_share,
    )


@dataclass(frozen=True)
class Bucket:
    """A token bucket's state: ``tokens`` as of ``at`` (monotonic seconds)."""

    tokens: float
    at: float


def refill(bucket: Bucket | None, rate: float | None, burst: float, now: float) -> Bucket:
    """The bucket at ``now``: a new bucket starts full; tokens accrue at ``rate`` per second up to ``burst``."""
    if bucket is None or rate is None:
        return Bucket(burst, now)
    gained = max(0.0, now - bucket.at) * rate
    return Bucket(min(burst, bucket.tokens + gained), now)


def wait_for_s(bucket: Bucket, rate: float | None, need: float) -> float:
    """Seconds until the bucket holds ``need`` (0 when it does): 0.25 tokens at 0.5/s, needing 1 → 1.5 s."""
    if rate is None or bucket.tokens >= need:
        return 0.0
    return (need - bucket.tokens) / rate


class Verdict(StrEnum):
    ADMIT = "admit"
    RATE_LIMITED = "rate_limited"
    TOKENS_LIMITED = "tokens_limited"
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
    """What admission remembers of one (tenant, pool): its buckets and its requests in progress."""

    bucket: Bucket | None = None
    in_flight: int = 0
    token_bucket: Bucket | None = None


def admit(
    state: TenantState, policy: TenantPolicy, pool: str, now: float, cost_tokens: int = 0
) -> tuple[Decision, TenantState]:
    """Admit one request costing ``cost_tokens`` (taking a request token, its generation tokens and a concurrency
    slot) or say why not and when to retry."""
    quota = policy.quota(pool)
    priority = PRIORITY[policy.slo_class]
    bucket = refill(state.bucket, quota.rate_rps, quota.burst, now)
    tokens = refill(state.token_bucket, quota.tokens_per_second, quota.token_burst, now)
    waiting = replace(state, bucket=bucket, token_bucket=tokens)
    if state.in_flight >= quota.max_concurrency:
        # no clock says when a slot frees; a second is the usual client back-off
        return Decision(Verdict.CONCURRENCY_LIMITED, priority, 1.0), waiting
    wait = wait_for_s(bucket, quota.rate_rps, 1.0)
    if wait > 0:
        return Decision(Verdict.RATE_LIMITED, priority, wait), waiting
    wait = wait_for_s(tokens, quota.tokens_per_second, min(cost_tokens, quota.token_burst))
    if wait > 0:
        return Decision(Verdict.TOKENS_LIMITED, priority, wait), waiting
    taken = bucket if quota.rate_rps is None else Bucket(bucket.tokens - 1.0, now)
    spent = tokens if quota.tokens_per_second is None else Bucket(tokens.tokens - cost_tokens, now)
    return Decision(Verdict.ADMIT, priority), TenantState(taken, state.in_flight + 1, spent)


def release(state: TenantState) -> TenantState:
    """A request admitted earlier has finished (answered, failed or refused downstream)."""
    return replace(state, in_flight=max(0, state.in_flight - 1))


def idle(state: TenantState, quota: Quota, now: float) -> bool:
    """Whether ``state`` admits exactly as a fresh one: nothing in flight and both buckets back at their burst (a
    bucket at 3 of 10 tokens refilling 1/s is idle 7 s later)."""
    if state.in_flight:
        return False
    request = refill(state.bucket, quota.rate_rps, quota.burst, now)
    tokens = refill(state.token_bucket, quota.tokens_per_second, quota.token_burst, now)
    return request.tokens >= quota.burst and tokens.tokens >= quota.token_burst


def prune(
    states: Mapping[tuple[str, str], TenantState], book: QuotaBook, now: float
) -> dict[tuple[str, str], TenantState]:
    """The (tenant, pool) states that are not idle: dropping the others changes no decision."""
    return {key: s for key, s in states.items() if not idle(s, book.policy(key[0]).quota(key[1]), now)}
