"""Admission control with plain numbers: the token bucket, the concurrency cap, SLO classes, quotas from desired."""

from __future__ import annotations

from typing import Any

import pytest

from inference_agent.serving.frontend.admission import (
    ANONYMOUS_QUOTA,
    DEFAULT_TENANT,
    Bucket,
    Decision,
    Quota,
    QuotaBook,
    TenantPolicy,
    TenantState,
    Verdict,
    admit,
    idle,
    prune,
    refill,
    release,
    wait_for_s,
)
from inference_agent.torch_runtime.api import Priority
from wire.control import DesiredState, SloClass

LIMITED = TenantPolicy(SloClass.STANDARD, {"p": Quota(rate_rps=2.0, burst=2.0, max_concurrency=10)})


@pytest.mark.parametrize(
    ("bucket", "now", "tokens"),
    [
        (None, 5.0, 2.0),  # a new bucket starts full
        (Bucket(0.0, 0.0), 0.25, 0.5),  # 0.25 s at 2 rps → half a token
        (Bucket(0.0, 0.0), 10.0, 2.0),  # capped at the burst
        (Bucket(1.5, 3.0), 2.0, 1.5),  # time going backwards adds nothing
    ],
)
def test_refill(bucket: Bucket | None, now: float, tokens: float) -> None:
    assert refill(bucket, 2.0, 2.0, now) == Bucket(tokens, now)


def test_wait_for_a_token() -> None:
    assert wait_for_s(Bucket(0.25, 0.0), 0.5, 1.0) == pytest.approx(1.5)
    assert wait_for_s(Bucket(-500.0, 0.0), 200.0, 200.0) == pytest.approx(3.5)  # a debt is paid back first
    assert wait_for_s(Bucket(0.0, 0.0), None, 1.0) == 0.0


def test_generation_tokens_are_admitted_at_their_rate_and_a_long_request_takes_the_whole_burst() -> None:
    policy = TenantPolicy(SloClass.BATCH, {"p": Quota(tokens_per_second=200.0, token_burst=200.0)})
    decision, state = admit(TenantState(), policy, "p", 0.0, cost_tokens=700)  # more than the burst: a full bucket
    assert decision.verdict is Verdict.ADMIT and state.token_bucket == Bucket(-500.0, 0.0)
    decision, state = admit(release(state), policy, "p", 1.0, cost_tokens=100)  # −300 at 1 s: 2 s to 100
    assert decision.verdict is Verdict.TOKENS_LIMITED and decision.retry_after_s == pytest.approx(2.0)
    decision, state = admit(state, policy, "p", 3.0, cost_tokens=100)
    assert decision.verdict is Verdict.ADMIT and state.token_bucket == Bucket(0.0, 3.0)
    decision, _ = admit(TenantState(), policy, "other", 0.0, cost_tokens=10_000)
    assert decision.verdict is Verdict.ADMIT  # another pool: unlimited


def test_burst_then_rate_limited_with_retry_after() -> None:
    state = TenantState()
    verdicts = []
    for now in (0.0, 0.0, 0.0):
        decision, state = admit(state, LIMITED, "p", now)
        verdicts.append(decision.verdict)
    assert verdicts == [Verdict.ADMIT, Verdict.ADMIT, Verdict.RATE_LIMITED]
    assert decision.retry_after_s == pytest.approx(0.5)  # empty bucket at 2 rps
    assert decision.retry_after_header == "1"
    decision, state = admit(state, LIMITED, "p", 0.5)
    assert decision.verdict is Verdict.ADMIT


def test_concurrency_cap_and_release() -> None:
    policy = TenantPolicy(SloClass.BATCH, {"p": Quota(max_concurrency=2)})
    state = TenantState()
    for _ in range(2):
        decision, state = admit(state, policy, "p", 0.0)
        assert decision.verdict is Verdict.ADMIT
    decision, state = admit(state, policy, "p", 0.0)
    assert decision.verdict is Verdict.CONCURRENCY_LIMITED
    assert state.in_flight == 2
    state = release(state)
    decision, state = admit(state, policy, "p", 0.0)
    assert decision.verdict is Verdict.ADMIT


def test_other_pools_keep_the_defaults() -> None:
    decision, state = admit(TenantState(in_flight=63), LIMITED, "other", 0.0)
    assert decision.verdict is Verdict.ADMIT
    decision, _ = admit(state, LIMITED, "other", 0.0)
    assert decision.verdict is Verdict.CONCURRENCY_LIMITED  # default concurrency 64


@pytest.mark.parametrize(
    ("slo", "priority"),
    [
        (SloClass.LATENCY_CRITICAL, Priority.LATENCY_CRITICAL),
        (SloClass.STANDARD, Priority.STANDARD),
        (SloClass.BATCH, Priority.BATCH),
    ],
)
def test_slo_class_gives_the_priority(slo: SloClass, priority: Priority) -> None:
    decision, _ = admit(TenantState(), TenantPolicy(slo), "p", 0.0)
    assert decision.priority is priority


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert Decision(Verdict.RATE_LIMITED, Priority.STANDARD, 1.5).retry_after_header == "2"
    assert Decision(Verdict.RATE_LIMITED, Priority.STANDARD, 0.01).retry_after_header == "1"


def from_desired(body: dict[str, Any]) -> QuotaBook:
    return QuotaBook.from_desired(DesiredState.model_validate(body))


def test_quotas_from_desired() -> None:
    book = from_desired(
        {"tenants": {"acme": {"slo_class": "latency_critical", "quotas": {"p": {"rate_rps": 5, "max_concurrency": 4}}}}}
    )
    assert book.policy("acme") == TenantPolicy(SloClass.LATENCY_CRITICAL, {"p": Quota(5.0, 5.0, 4)})
    assert book.policy("nobody") == TenantPolicy()
    tokens = from_desired({"tenants": {"b": {"quotas": {"p": {"tokens_per_second": 300}}}}})
    assert tokens.policy("b").quota("p") == Quota(tokens_per_second=300.0, token_burst=300.0)


@pytest.mark.parametrize(
    ("tenants", "field"),
    [
        ({"a": {"slo_class": "gold"}}, "tenants.a.slo_class"),
        ({"a": {"quotas": {"p": {"rate_rps": -1}}}}, "tenants.a.quotas.p.rate_rps"),
        ({"a": {"quotas": {"p": {"max_concurrency": 0}}}}, "tenants.a.quotas.p.max_concurrency"),
        ({"a": {"quotas": {"p": {"tokens_per_second": 0}}}}, "tenants.a.quotas.p.tokens_per_second"),
        ({"a": {"quotas": {"p": {"tokens_per_second": 5, "token_burst": 0.5}}}}, "tenants.a.quotas.p.token_burst"),
    ],
)
def test_bad_quotas_name_the_field(tenants: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        DesiredState.model_validate({"tenants": tenants})


@pytest.mark.parametrize(
    ("state", "now", "is_idle"),
    [
        (TenantState(), 0.0, True),
        (TenantState(in_flight=1), 100.0, False),  # a request in progress
        (TenantState(Bucket(0.0, 0.0)), 0.5, False),  # 1 of 2 tokens back at 2 rps
        (TenantState(Bucket(0.0, 0.0)), 1.0, True),  # refilled: admits as a fresh state would
    ],
)
def test_idle_states_are_those_a_fresh_one_equals(state: TenantState, now: float, is_idle: bool) -> None:
    assert idle(state, LIMITED.quota("p"), now) is is_idle


def test_prune_keeps_only_the_states_that_still_matter() -> None:
    book = QuotaBook({"a": LIMITED})
    states = {("a", "p"): TenantState(Bucket(0.0, 0.0)), ("a", "q"): TenantState(), ("b", "p"): TenantState()}
    assert prune(states, book, now=0.5) == {("a", "p"): TenantState(Bucket(0.0, 0.0))}
    assert prune(states, book, now=1.0) == {}


def test_anonymous_callers_share_the_anonymous_quota_on_every_pool_unless_default_has_its_own() -> None:
    assert QuotaBook().policy(DEFAULT_TENANT).quota("any-pool") == ANONYMOUS_QUOTA
    assert QuotaBook().policy("named").quota("any-pool") == Quota()  # a known tenant without a quota: unlimited
    own = from_desired({"tenants": {"default": {"quotas": {"p": {"rate_rps": 1.0}}}}})
    assert own.policy(DEFAULT_TENANT).quota("p").rate_rps == 1.0
    assert own.policy(DEFAULT_TENANT).quota("q") == ANONYMOUS_QUOTA
    shared = TenantState()
    for _ in range(int(ANONYMOUS_QUOTA.burst)):
        decision, shared = admit(release(shared), QuotaBook().policy(DEFAULT_TENANT), "p", 0.0)
        assert decision.verdict is Verdict.ADMIT
    assert admit(release(shared), QuotaBook().policy(DEFAULT_TENANT), "p", 0.0)[0].verdict is Verdict.RATE_LIMITED
