"""The tenants part of the desired state is read by the agent's admission control: the stored quotas, each node's
share of them over the pool's replicas, and throttled tenants' limits multiplied by their level; built as one part
(what every node is told, and per node only what differs) and published on the board."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, insert

from collector.tables import node_reports, nodes
from fleet.desired.board import DesiredBoard, Part
from inference_agent.serving.frontend.admission import DEFAULT_MAX_CONCURRENCY, PRIORITY, Quota, QuotaBook
from inference_agent.serving.frontend.server import TenantDirectory
from inference_agent.torch_runtime.api import Priority
from isolation.desired import AGENT_DEFAULT_MAX_CONCURRENCY, TenantsInputs, TenantsPublisher
from isolation.events import ThrottleLevel
from isolation.planning import GpuDevice
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, Tenant, TenantStore
from tests.support.clock import FakeClock
from tests.support.fleet_reader import fleet_reader
from wire.control import (
    DesiredState,
    NodeReport,
    PoolLimits,
    QuotaDesired,
    SloClass,
    TenantDesired,
    key_digest,
)


def publisher(engine: Engine) -> TenantsPublisher:
    return TenantsPublisher(fleet_reader(engine), DesiredBoard(engine))


def told(engine: Engine, clock: FakeClock, node: str) -> DesiredState | None:
    """What ``node`` is told once the part is published now (None: nothing)."""
    tenants = publisher(engine)
    tenants.publish(clock())
    return tenants.board.for_node(node)


def _tenant(name: str, slo_class: SloClass, **quotas: QuotaSpec) -> Tenant:
    return Tenant(name, slo_class, 1, 0.0, 0.0, quotas)


def _inputs(tenants: list[Tenant], replicas: dict[tuple[str, str], int], *levels: ThrottleLevel) -> TenantsInputs:
    return TenantsInputs(tenants, levels, replicas)


def _for(inputs: TenantsInputs, node: str) -> DesiredState:
    return inputs.part().for_node(node)


def _quota(desired: DesiredState, tenant: str, pool: str) -> Quota:
    return QuotaBook.from_desired(desired).policy(tenant).quota(pool)


def test_the_agents_default_concurrency_is_the_one_a_throttle_starts_from() -> None:
    assert AGENT_DEFAULT_MAX_CONCURRENCY == DEFAULT_MAX_CONCURRENCY


def test_nothing_is_desired_while_no_tenant_exists(engine: Engine, clock: FakeClock) -> None:
    assert told(engine, clock, "node-a") is None


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
    desired = told(engine, clock, "node-a")  # no node up: nothing to divide over, the whole quotas
    assert desired is not None
    assert desired.tenants["acme"] == TenantDesired(
        slo_class=SloClass.LATENCY_CRITICAL,
        quotas={
            "chat": QuotaDesired(rate_rps=0.5, burst=1.0, max_concurrency=4, kv_share=0.7),  # globex holds 30 %
            "embed": QuotaDesired(rate_rps=20.0, burst=20.0),
        },
    )
    book = QuotaBook.from_desired(desired)
    acme = book.policy("acme")
    assert PRIORITY[acme.slo_class] is Priority.LATENCY_CRITICAL
    assert acme.quota("chat") == Quota(rate_rps=0.5, burst=1.0, max_concurrency=4, kv_share=0.7)
    assert acme.quota("embed") == Quota(rate_rps=20.0, burst=20.0, max_concurrency=DEFAULT_MAX_CONCURRENCY)
    assert book.policy("globex").quota("chat") == Quota(kv_share=0.3)  # no admission limit: the defaults
    assert book.policy("initech").slo_class.value == "standard" and book.policy("initech").quotas == {}


def test_each_node_is_told_its_replicas_share_of_the_pool_quota() -> None:
    acme = _tenant("acme", SloClass.STANDARD, chat=QuotaSpec(rate_rps=10.0, max_concurrency=10))
    inputs = _inputs([acme], {("node-a", "chat"): 2, ("node-b", "chat"): 1})
    c = _quota(_for(inputs, "node-c"), "acme", "chat")
    assert c == Quota(rate_rps=10.0, burst=10.0, max_concurrency=10)  # no replica there: the whole quota
    a = _quota(_for(inputs, "node-a"), "acme", "chat")
    b = _quota(_for(inputs, "node-b"), "acme", "chat")
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
    inputs = _inputs([batch], replicas, *levels)
    tenants = _for(inputs, "node-a").tenants
    assert tenants["batch"].quotas == {
        "chat": QuotaDesired(rate_rps=2.0, burst=2.0, max_concurrency=1),  # 8 / 2 replicas × ½; never below 1
        "embed": QuotaDesired(max_concurrency=16),  # unlimited: the agent's 64 × ¼
    }
    assert tenants["stranger"] == TenantDesired(
        slo_class=SloClass.STANDARD, quotas={"chat": QuotaDesired(max_concurrency=32)}
    )
    QuotaBook.from_desired(_for(inputs, "node-a"))  # the agent reads it
    other = _for(inputs, "node-b").tenants
    assert other["batch"].quotas["chat"] == QuotaDesired(rate_rps=4.0, burst=4.0, max_concurrency=1)
    assert "stranger" not in other


def test_a_limited_pool_is_capped_on_each_node_and_a_throttle_lowers_the_cap() -> None:
    fast = _tenant("fast", SloClass.LATENCY_CRITICAL, vision=QuotaSpec())
    noisy = _tenant("noisy", SloClass.BATCH, chat=QuotaSpec(active_thread_percentage=20))
    replicas = {("node-a", "chat"): 1, ("node-a", "vision"): 1, ("node-b", "chat"): 2}
    inputs = _inputs([fast, noisy], replicas)
    assert _for(inputs, "node-a").pool_limits == {"chat": PoolLimits(cpu_share=0.2)}  # vision: the whole node
    assert _for(inputs, "node-b").pool_limits == {"chat": PoolLimits(cpu_share=0.1)}  # two replicas split it
    throttled = _inputs([fast, noisy], replicas, ThrottleLevel("node-a", "chat", "noisy", 0.5, 1.0))
    assert _for(throttled, "node-a").pool_limits == {"chat": PoolLimits(cpu_share=0.1)}
    assert _for(throttled, "node-b").pool_limits == {"chat": PoolLimits(cpu_share=0.1)}  # only node-a


def test_gpu_replicas_get_their_mps_limits_and_a_pool_not_running_yet_is_planned_as_one_replica() -> None:
    noisy = _tenant("noisy", SloClass.BATCH, chat=QuotaSpec(active_thread_percentage=30, gpu_memory_mib=8192))
    inputs = TenantsInputs(
        [noisy], (), {("node-a", "chat"): 2}, {"node-a": (GpuDevice(0, 81_920), GpuDevice(1, 81_920))}
    )
    assert _for(inputs, "node-a").pool_limits == {
        "chat": PoolLimits(active_thread_percentage=30, gpu_memory_mib=8192)  # one replica on each GPU
    }
    assert _for(inputs, "node-z").pool_limits == {"chat": PoolLimits(cpu_share=0.3)}  # a CPU node


def test_tokens_per_second_is_shared_and_throttled_like_the_rate() -> None:
    acme = _tenant("acme", SloClass.STANDARD, chat=QuotaSpec(tokens_per_second=1000.0))
    inputs = _inputs(
        [acme], {("node-a", "chat"): 1, ("node-b", "chat"): 1}, ThrottleLevel("node-a", "chat", "acme", 0.5, 1.0)
    )
    a = _for(inputs, "node-a").tenants["acme"].quotas["chat"]
    b = _for(inputs, "node-b").tenants["acme"].quotas["chat"]
    assert (a.tokens_per_second, a.token_burst) == (250.0, 250.0)  # 500 on its replica × ½
    assert b.tokens_per_second == 500.0


def test_the_part_names_per_node_only_what_differs_so_it_grows_with_replicas_not_nodes_times_tenants() -> None:
    tenants = [
        _tenant(f"t{i}", SloClass.STANDARD, **{f"p{j}": QuotaSpec(rate_rps=10.0) for j in range(5)}) for i in range(10)
    ]
    replicas = {(f"node-{n}", "p0"): 1 for n in range(4)}  # 100 nodes up, 4 of them run pool p0
    part = _inputs(tenants, replicas).part()
    assert set(part.nodes) == {f"node-{n}" for n in range(4)}
    assert all(set(t.quotas) == {"p0"} for own in part.nodes.values() for t in own.tenants.values())
    assert part.for_node("node-99") == part.common  # the other 96 are told common alone
    assert part.common.tenants["t0"].quotas["p0"] == QuotaDesired(rate_rps=10.0, burst=10.0, kv_share=0.1)
    assert part.for_node("node-0").tenants["t0"].quotas["p0"].rate_rps == 2.5  # one of four replicas


def test_every_node_is_told_the_digests_of_every_tenants_keys_and_the_agent_reads_them(
    engine: Engine, clock: FakeClock
) -> None:
    TenantStore(engine).create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=1.0)}, now=1.0)
    TenantStore(engine).create("globex", SloClass.BATCH, {}, now=1.0)  # no quota on any pool: still told
    keys = TenantKeyStore(engine)
    (_, acme), (_, globex) = keys.create("acme", now=1.0), keys.create("globex", now=1.0)
    for node in ("node-a", "node-b"):
        desired = told(engine, clock, node)
        assert desired is not None
        found = desired.tenant_keys
        assert [found.get(key_digest(k)) for k in (acme, globex, acme + "x")] == ["acme", "globex", None]
        assert acme not in desired.model_dump_json()  # digests only
        assert TenantDirectory(QuotaBook.from_desired(desired), found).known == {"acme", "globex", "default"}


def report(engine: Engine, clock: FakeClock, node: str, pools: dict[str, dict[str, Any]]) -> None:
    """``node`` is up and its latest report says it runs ``pools``."""
    body = NodeReport.model_validate({"ts": clock(), "pools": pools}).model_dump(mode="json")
    with engine.begin() as conn:
        conn.execute(insert(nodes).values(id=node, first_seen=clock() - 60, last_seen=clock()))
        conn.execute(insert(node_reports).values(node_id=node, ts=clock(), received_at=clock(), report=body))


def test_a_publish_reads_the_fleet_at_its_time_and_writes_nothing_while_the_part_is_unchanged(
    engine: Engine, clock: FakeClock
) -> None:
    TenantStore(engine).create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=10.0)}, now=clock())
    tenants = publisher(engine)
    first = tenants.publish(clock())
    assert _quota(tenants.board.for_node("node-a") or DesiredState(), "acme", "chat").rate_rps == 10.0
    assert tenants.publish(clock()) == first  # nothing moved: no new version for the other servers to reload
    report(engine, clock, "node-a", {"chat": {"ready": 1}})
    report(engine, clock, "node-b", {"chat": {"ready": 1}})
    assert _quota(tenants.board.for_node("node-a") or DesiredState(), "acme", "chat").rate_rps == 10.0  # not yet
    assert tenants.publish(clock()) == first + 1
    assert _quota(tenants.board.for_node("node-a") or DesiredState(), "acme", "chat").rate_rps == 5.0  # one of two
    other = DesiredBoard(engine)  # another server, at its next refresh
    other.refresh()
    assert other.part(Part.TENANTS) == tenants.board.part(Part.TENANTS)
