"""The tenants part of the desired state is read by the agent's admission control: the stored quotas, each node's
share of them over the pool's replicas, and throttled tenants' limits multiplied by their level."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, insert

from collector.tables import NO_DEVICE, nodes, series_latest
from inference_agent.engine.api import Priority
from inference_agent.serving.admission import DEFAULT_MAX_CONCURRENCY, Quota, QuotaBook
from inference_agent.serving.frontend import TenantDirectory
from inference_agent.serving.tenant_keys import TenantKeyHashes
from isolation.desired import AGENT_DEFAULT_MAX_CONCURRENCY, TenantsAnswer, TenantsDesired, node_shares
from isolation.events import ThrottleLevel
from isolation.planning import GpuDevice
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, SloClass, Tenant, TenantStore
from tests.support.clock import FakeClock


def _desired(engine: Engine, clock: FakeClock, cache_seconds: float = 0.0) -> TenantsDesired:
    return TenantsDesired(engine, node_down_after_seconds=3.0, cache_seconds=cache_seconds, clock=clock)


def _tenant(name: str, slo_class: SloClass, **quotas: QuotaSpec) -> Tenant:
    return Tenant(name, slo_class, 1, 0.0, 0.0, quotas)


def _answer(tenants: list[Tenant], replicas: dict[tuple[str, str], int], *levels: ThrottleLevel) -> TenantsAnswer:
    return TenantsAnswer(tenants, node_shares(tenants, replicas), levels, replicas)


def test_the_agents_default_concurrency_is_the_one_a_throttle_starts_from() -> None:
    assert AGENT_DEFAULT_MAX_CONCURRENCY == DEFAULT_MAX_CONCURRENCY


def test_nothing_is_desired_while_no_tenant_exists(engine: Engine, clock: FakeClock) -> None:
    assert _desired(engine, clock)("node-a") is None


def test_the_agents_quota_book_reads_what_was_stored(engine: Engine, clock: FakeClock) -> None:
    store = TenantStore(engine)
    store.create(
        "acme",
        SloClass.LATENCY_CRITICAL,
        {"chat": QuotaSpec(rate_rps=0.5, max_concurrency=4, gpu_memory_mib=4096), "embed": QuotaSpec(rate_rps=20.0)},
        now=1.0,
    )
    store.create("globex", SloClass.BATCH, {"chat": QuotaSpec(active_thread_percentage=30)}, now=1.0)
    store.create("initech", SloClass.STANDARD, {}, now=1.0)
    desired = _desired(engine, clock)("node-a")  # no node up: nothing to divide over, the whole quotas
    assert desired is not None
    assert desired["tenants"]["acme"] == {
        "slo_class": "latency_critical",
        "quotas": {
            "chat": {"rate_rps": 0.5, "burst": 1.0, "max_concurrency": 4, "kv_share": 0.7},  # globex holds 30 %
            "embed": {"rate_rps": 20.0, "burst": 20.0},
        },
    }
    book = QuotaBook.from_desired(desired)
    acme = book.policy("acme")
    assert acme.slo_class.priority is Priority.LATENCY_CRITICAL
    assert acme.quota("chat") == Quota(rate_rps=0.5, burst=1.0, max_concurrency=4, kv_share=0.7)
    assert acme.quota("embed") == Quota(rate_rps=20.0, burst=20.0, max_concurrency=DEFAULT_MAX_CONCURRENCY)
    assert book.policy("globex").quota("chat") == Quota(kv_share=0.3)  # no admission limit: the defaults
    assert book.policy("initech").slo_class.value == "standard" and book.policy("initech").quotas == {}


def test_each_node_is_told_its_replicas_share_of_the_pool_quota() -> None:
    acme = _tenant("acme", SloClass.STANDARD, chat=QuotaSpec(rate_rps=10.0, max_concurrency=10))
    answer = _answer([acme], {("node-a", "chat"): 2, ("node-b", "chat"): 1})
    c = QuotaBook.from_desired(answer.for_node("node-c") or {}).policy("acme").quota("chat")
    assert c == Quota(rate_rps=10.0, burst=10.0, max_concurrency=10)  # no replica there: the whole quota
    a = QuotaBook.from_desired(answer.for_node("node-a") or {}).policy("acme").quota("chat")
    b = QuotaBook.from_desired(answer.for_node("node-b") or {}).policy("acme").quota("chat")
    assert (a.rate_rps, a.max_concurrency) == (6.666, 7)  # 3.333 + 3.333; 4 + 3 of 10 split 4, 3, 3
    assert (b.rate_rps, b.max_concurrency) == (3.333, 3)


def test_a_throttled_tenant_gets_its_limits_times_its_level_on_that_node_only() -> None:
    batch = _tenant("batch", SloClass.BATCH, chat=QuotaSpec(rate_rps=8.0, max_concurrency=1), embed=QuotaSpec())
    replicas = {("node-a", "chat"): 1, ("node-b", "chat"): 1, ("node-a", "embed"): 1}
    levels = (
        ThrottleLevel("node-a", "chat", "batch", 0.5, 1.0),
        ThrottleLevel("node-a", "embed", "batch", 0.25, 1.0),
        ThrottleLevel("node-a", "chat", "stranger", 0.5, 1.0),
    )
    answer = _answer([batch], replicas, *levels)
    tenants = (answer.for_node("node-a") or {})["tenants"]
    assert tenants["batch"]["quotas"] == {
        "chat": {"rate_rps": 2.0, "burst": 2.0, "max_concurrency": 1},  # 8 / 2 replicas × ½; never below 1
        "embed": {"rate_rps": None, "max_concurrency": 16},  # unlimited: the agent's 64 × ¼
    }
    assert tenants["stranger"] == {
        "slo_class": "standard",
        "quotas": {"chat": {"rate_rps": None, "max_concurrency": 32}},
    }
    QuotaBook.from_desired(answer.for_node("node-a") or {})  # the agent reads it
    other = (answer.for_node("node-b") or {})["tenants"]
    assert other["batch"]["quotas"]["chat"] == {"rate_rps": 4.0, "burst": 4.0, "max_concurrency": 1}
    assert "stranger" not in other


def _report(engine: Engine, clock: FakeClock, node: str, pool: str, ready: int) -> None:
    extra: dict[str, Any] = {"replicas_ready": ready, "replicas_starting": 0}
    with engine.begin() as conn:
        conn.execute(insert(nodes).values(id=node, first_seen=clock() - 60, last_seen=clock()))
        conn.execute(insert(series_latest).values(node_id=node, device=NO_DEVICE, pool=pool, ts=clock(), extra=extra))


def test_the_answer_is_read_once_per_cache_period_for_every_node(engine: Engine, clock: FakeClock) -> None:
    TenantStore(engine).create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=10.0)}, now=clock())
    desired = _desired(engine, clock, cache_seconds=1.0)
    assert (desired("node-a") or {})["tenants"]["acme"]["quotas"]["chat"]["rate_rps"] == 10.0
    _report(engine, clock, "node-a", "chat", ready=1)
    _report(engine, clock, "node-b", "chat", ready=1)
    assert (desired("node-a") or {})["tenants"]["acme"]["quotas"]["chat"]["rate_rps"] == 10.0  # still cached
    clock.advance(1.0)
    assert (desired("node-a") or {})["tenants"]["acme"]["quotas"]["chat"]["rate_rps"] == 5.0  # one of two replicas


def test_a_limited_pool_is_capped_on_each_node_and_a_throttle_lowers_the_cap() -> None:
    fast = _tenant("fast", SloClass.LATENCY_CRITICAL, vision=QuotaSpec())
    noisy = _tenant("noisy", SloClass.BATCH, chat=QuotaSpec(active_thread_percentage=20))
    replicas = {("node-a", "chat"): 1, ("node-a", "vision"): 1, ("node-b", "chat"): 2}
    answer = _answer([fast, noisy], replicas)
    assert (answer.for_node("node-a") or {})["pool_limits"] == {"chat": {"cpu_share": 0.2}}  # vision: the whole node
    assert (answer.for_node("node-b") or {})["pool_limits"] == {"chat": {"cpu_share": 0.1}}  # two replicas split it
    throttled = _answer([fast, noisy], replicas, ThrottleLevel("node-a", "chat", "noisy", 0.5, 1.0))
    assert (throttled.for_node("node-a") or {})["pool_limits"] == {"chat": {"cpu_share": 0.1}}
    assert (throttled.for_node("node-b") or {})["pool_limits"] == {"chat": {"cpu_share": 0.1}}  # only node-a


def test_gpu_replicas_get_their_mps_limits_and_a_pool_not_running_yet_is_planned_as_one_replica() -> None:
    noisy = _tenant("noisy", SloClass.BATCH, chat=QuotaSpec(active_thread_percentage=30, gpu_memory_mib=8192))
    answer = TenantsAnswer(
        [noisy], {}, (), {("node-a", "chat"): 2}, {"node-a": (GpuDevice(0, 81_920), GpuDevice(1, 81_920))}
    )
    assert (answer.for_node("node-a") or {})["pool_limits"] == {
        "chat": {"active_thread_percentage": 30, "gpu_memory_mib": 8192}  # one replica on each GPU
    }
    assert (answer.for_node("node-z") or {})["pool_limits"] == {"chat": {"cpu_share": 0.3}}  # a CPU node


def test_tokens_per_second_is_shared_and_throttled_like_the_rate() -> None:
    acme = _tenant("acme", SloClass.STANDARD, chat=QuotaSpec(tokens_per_second=1000.0))
    answer = _answer(
        [acme], {("node-a", "chat"): 1, ("node-b", "chat"): 1}, ThrottleLevel("node-a", "chat", "acme", 0.5, 1.0)
    )
    a = (answer.for_node("node-a") or {})["tenants"]["acme"]["quotas"]["chat"]
    b = (answer.for_node("node-b") or {})["tenants"]["acme"]["quotas"]["chat"]
    assert (a["tokens_per_second"], a["token_burst"]) == (250.0, 250.0)  # 500 on its replica × ½
    assert b["tokens_per_second"] == 500.0


def test_every_node_is_told_the_digests_of_every_tenants_keys_and_the_agent_reads_them(
    engine: Engine, clock: FakeClock
) -> None:
    TenantStore(engine).create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=1.0)}, now=1.0)
    TenantStore(engine).create("globex", SloClass.BATCH, {}, now=1.0)  # no quota on any pool: still told
    keys = TenantKeyStore(engine)
    (_, acme), (_, globex) = keys.create("acme", now=1.0), keys.create("globex", now=1.0)
    for node in ("node-a", "node-b"):
        desired = _desired(engine, clock)(node)
        assert desired is not None
        told = TenantKeyHashes.from_desired(desired)
        assert (told.tenant_of(acme), told.tenant_of(globex), told.tenant_of(acme + "x")) == ("acme", "globex", None)
        assert acme not in str(desired)  # digests only
        assert TenantDirectory(QuotaBook.from_desired(desired), told).known == {"acme", "globex", "default"}


class _SlowRead(TenantsDesired):
    """Counts reads; the second one waits until the test lets it go."""

    def __init__(self, engine: Engine, clock: FakeClock) -> None:
        super().__init__(engine, node_down_after_seconds=3.0, cache_seconds=1.0, clock=clock)
        self.reads = 0
        self.second_started = threading.Event()
        self.release = threading.Event()

    def _read(self, now: float) -> TenantsAnswer:
        self.reads += 1
        if self.reads == 2:
            self.second_started.set()
            self.release.wait(timeout=10)
        return _answer([], {})


def test_an_expired_answer_is_read_once_while_the_other_callers_keep_the_last_one(
    engine: Engine, clock: FakeClock
) -> None:
    desired = _SlowRead(engine, clock)
    desired("node-a")  # the first read: nothing to answer before it
    clock.advance(2.0)  # expired: the next caller reads again, and blocks in the read
    reader = threading.Thread(target=desired, args=("node-a",))
    reader.start()
    assert desired.second_started.wait(timeout=10)
    for _ in range(16):  # meanwhile every other request answers at once with the previous answer
        desired("node-b")
    desired.release.set()
    reader.join(timeout=10)
    assert desired.reads == 2
