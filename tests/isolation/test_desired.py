"""The tenants part of the desired state is read by the agent's admission control as the quotas that were stored."""

from __future__ import annotations

from sqlalchemy import Engine

from inference_agent.engine.api import Priority
from inference_agent.serving.admission import DEFAULT_MAX_CONCURRENCY, Quota, QuotaBook
from isolation.desired import tenants_desired
from isolation.tenants import QuotaSpec, SloClass, TenantStore


def test_nothing_is_desired_while_no_tenant_exists(engine: Engine) -> None:
    assert tenants_desired(engine) is None


def test_the_agents_quota_book_reads_what_was_stored(engine: Engine) -> None:
    store = TenantStore(engine)
    store.create(
        "acme",
        SloClass.LATENCY_CRITICAL,
        {"chat": QuotaSpec(rate_rps=0.5, max_concurrency=4, gpu_memory_mib=4096), "embed": QuotaSpec(rate_rps=20.0)},
        now=1.0,
    )
    store.create("globex", SloClass.BATCH, {"chat": QuotaSpec(active_thread_percentage=30)}, now=1.0)
    store.create("initech", SloClass.STANDARD, {}, now=1.0)
    desired = tenants_desired(engine)
    assert desired is not None
    assert desired["tenants"]["acme"] == {
        "slo_class": "latency_critical",
        "quotas": {
            "chat": {"rate_rps": 0.5, "burst": 1.0, "max_concurrency": 4},
            "embed": {"rate_rps": 20.0, "burst": 20.0},
        },
    }
    book = QuotaBook.from_desired(desired)
    acme = book.policy("acme")
    assert acme.slo_class.priority is Priority.LATENCY_CRITICAL
    assert acme.quota("chat") == Quota(rate_rps=0.5, burst=1.0, max_concurrency=4)
    assert acme.quota("embed") == Quota(rate_rps=20.0, burst=20.0, max_concurrency=DEFAULT_MAX_CONCURRENCY)
    assert book.policy("globex").quota("chat") == Quota()  # only GPU limits: admission keeps its defaults
    assert book.policy("initech").slo_class.value == "standard" and book.policy("initech").quotas == {}
