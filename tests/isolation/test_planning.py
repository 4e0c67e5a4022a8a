"""Quota planning on small worked cases: MPS limits, CPU shares, KV budgets and admission limits per replica."""

from __future__ import annotations

import pytest

from isolation.planning import (
    GpuDevice,
    NodeResources,
    ReplicaLimits,
    ReplicaPlacement,
    TenantLimits,
    TenantQuota,
    kv_fractions,
    plan_replica_limits,
)

GPU_80_GIB = GpuDevice(index=0, memory_mib=81_920)


def chat(**changes: object) -> TenantQuota:
    """A latency-critical tenant: 30 % of the SMs, 16 GiB, 8 in flight, 20 rps over the pool."""
    fields: dict[str, object] = {
        "active_thread_percentage": 30,
        "gpu_memory_mib": 16_384,
        "max_concurrency": 8,
        "rate_rps": 20.0,
        **changes,
    }
    return TenantQuota("chat", "latency_critical", "text", **fields)  # type: ignore[arg-type]


def bulk(**changes: object) -> TenantQuota:
    """A batch tenant: 50 % of the SMs, 40 GiB, 4 in flight, 5 rps and 2000 tokens/s over the pool."""
    fields: dict[str, object] = {
        "active_thread_percentage": 50,
        "gpu_memory_mib": 40_960,
        "max_concurrency": 4,
        "rate_rps": 5.0,
        "tokens_per_second": 2000.0,
        **changes,
    }
    return TenantQuota("bulk", "batch", "text", **fields)  # type: ignore[arg-type]


def gpu_node(*replicas: ReplicaPlacement, cores: int = 8) -> NodeResources:
    return NodeResources("n1", cpu_cores=cores, gpus=(GPU_80_GIB,), replicas=replicas)


def by_tenant(limits: ReplicaLimits) -> dict[str, TenantLimits]:
    return {t.tenant: t for t in limits.tenants}


def test_two_tenants_on_one_80_gib_gpu_sum_into_the_replica_limits() -> None:
    (plan,) = plan_replica_limits([chat(), bulk()], [gpu_node(ReplicaPlacement("r1", "text", 0, kv_blocks=1000))])
    assert (plan.active_thread_percentage, plan.pinned_memory_mib) == (80, 57_344)  # 30 + 50 %, 16 + 40 GiB
    assert (plan.cpu_millicores, plan.torch_threads) == (None, 8)  # MPS caps it, not the CPU; alone: every thread
    tenants = by_tenant(plan)
    assert tenants["chat"] == TenantLimits("chat", "latency_critical", 20.0, None, 8, 375)  # 1000 × 30 / 80
    assert tenants["bulk"] == TenantLimits("bulk", "batch", 5.0, 2000.0, 4, 625)


def test_two_replicas_of_a_pool_on_one_gpu_split_its_share() -> None:
    node = gpu_node(ReplicaPlacement("r1", "text", 0, 1000), ReplicaPlacement("r2", "text", 0, 1000))
    plans = plan_replica_limits([chat(), bulk()], [node])
    assert [(p.active_thread_percentage, p.pinned_memory_mib, p.torch_threads) for p in plans] == [
        (40, 28_672, 4),
        (40, 28_672, 4),
    ]
    assert [by_tenant(p)["chat"].max_concurrency for p in plans] == [4, 4]
    assert [by_tenant(p)["bulk"].rate_rps for p in plans] == [2.5, 2.5]


def test_pools_sharing_a_gpu_each_get_their_own_tenants_share() -> None:
    classify = TenantQuota("chat", "latency_critical", "classify", active_thread_percentage=30, gpu_memory_mib=8192)
    node = gpu_node(ReplicaPlacement("r1", "classify", 0), ReplicaPlacement("r2", "text", 0, 1000))
    first, second = plan_replica_limits([classify, bulk()], [node])
    assert (first.active_thread_percentage, first.pinned_memory_mib, first.torch_threads) == (30, 8192, 3)
    assert (second.active_thread_percentage, second.pinned_memory_mib, second.torch_threads) == (50, 40_960, 5)


def test_batch_oversubscription_takes_kv_blocks_only_after_the_guaranteed_classes() -> None:
    (plan,) = plan_replica_limits(
        [chat(), bulk(active_thread_percentage=90)], [gpu_node(ReplicaPlacement("r1", "text", 0, 1000))]
    )
    assert plan.active_thread_percentage == 100  # 30 + 90 capped at the device
    assert {t.tenant: t.kv_blocks for t in plan.tenants} == {"chat": 300, "bulk": 700}


def test_unset_shares_split_what_the_set_ones_leave_and_memory_stays_unlimited() -> None:
    quotas = [chat(), TenantQuota("a", "standard", "text"), TenantQuota("b", "batch", "text")]
    (plan,) = plan_replica_limits(quotas, [gpu_node(ReplicaPlacement("r1", "text", 0, 100))])
    assert {t.tenant: t.kv_blocks for t in plan.tenants} == {"chat": 30, "a": 35, "b": 35}
    assert (plan.active_thread_percentage, plan.pinned_memory_mib) == (100, None)
    assert by_tenant(plan)["a"].max_concurrency is None and by_tenant(plan)["a"].rate_rps is None


def test_unlimited_cpu_replicas_are_not_capped_and_split_the_threads() -> None:
    node = NodeResources("cpu1", cpu_cores=2, replicas=(ReplicaPlacement("r1", "text"), ReplicaPlacement("r2", "text")))
    plans = plan_replica_limits([], [node])
    assert [(p.cpu_millicores, p.torch_threads, p.active_thread_percentage, p.pinned_memory_mib) for p in plans] == [
        (None, 1, None, None),
        (None, 1, None, None),
    ]


def test_a_limited_pool_caps_its_cpu_replicas_at_its_share_of_the_node() -> None:
    quotas = [
        TenantQuota("fast", "latency_critical", "classify"),  # unset: the whole node, so no cap
        TenantQuota("bulk", "batch", "text", active_thread_percentage=20),
    ]
    node = NodeResources("cpu1", 2, replicas=(ReplicaPlacement("r1", "classify"), ReplicaPlacement("r2", "text")))
    plans = plan_replica_limits(quotas, [node])
    assert [(p.cpu_millicores, p.compute_percent) for p in plans] == [(None, 100.0), (400, 20.0)]  # 20 % of 2 cores


def test_two_replicas_of_a_limited_pool_split_its_cpu_share() -> None:
    quotas = [TenantQuota("bulk", "batch", "text", active_thread_percentage=50)]
    node = NodeResources("cpu1", 4, replicas=(ReplicaPlacement("r1", "text"), ReplicaPlacement("r2", "text")))
    assert [p.cpu_millicores for p in plan_replica_limits(quotas, [node])] == [1000, 1000]  # 50 % of 4 cores, halved


def test_a_throttle_level_scales_the_tenants_share_and_its_replicas_limits() -> None:
    quotas = [chat(), bulk(active_thread_percentage=None, throttle_level=0.5)]  # bulk: 70 % derived, then halved
    (plan,) = plan_replica_limits(quotas, [gpu_node(ReplicaPlacement("r1", "text", 0, 1000))])
    assert plan.active_thread_percentage == 65  # 30 + 35
    assert {t.tenant: t.kv_blocks for t in plan.tenants} == {"chat": 462, "bulk": 538}  # 1000 × 30 / 65
    cpu = NodeResources("cpu1", 2, replicas=(ReplicaPlacement("r1", "text"),))
    (throttled,) = plan_replica_limits([TenantQuota("bulk", "batch", "text", throttle_level=0.25)], [cpu])
    assert throttled.cpu_millicores == 500  # 100 % × 0.25 of 2 cores


@pytest.mark.parametrize(("quota", "replicas", "split"), [(10, 3, [4, 3, 3]), (2, 3, [1, 1, 1]), (6, 2, [3, 3])])
def test_concurrency_is_spread_over_the_pools_replicas_across_nodes(
    quota: int, replicas: int, split: list[int]
) -> None:
    nodes = [NodeResources(f"n{i}", 1, replicas=(ReplicaPlacement(f"r{i}", "text"),)) for i in range(replicas)]
    plans = plan_replica_limits([bulk(max_concurrency=quota, rate_rps=10.0)], nodes)
    assert [p.tenants[0].max_concurrency for p in plans] == split
    assert {p.tenants[0].rate_rps for p in plans} == {round(10.0 / replicas, 3)}


def test_forty_nine_replicas_on_one_device_exceed_the_mps_client_limit() -> None:
    replicas = tuple(ReplicaPlacement(f"r{i:02}", "text", 0) for i in range(49))
    with pytest.raises(ValueError, match=r"node n1 GPU 0: 49 replicas, MPS serves at most 48"):
        plan_replica_limits([chat()], [gpu_node(*replicas)])
    assert len(plan_replica_limits([chat()], [gpu_node(*replicas[:48])])) == 48


@pytest.mark.parametrize(
    ("tenants", "nodes", "message"),
    [
        ([], [gpu_node(ReplicaPlacement("r1", "text", 1))], "node n1 has no GPU 1"),
        ([], [gpu_node(ReplicaPlacement("r1", "text"), ReplicaPlacement("r1", "text"))], "replica listed twice"),
        ([chat(), chat()], [], "tenant quota listed twice"),
    ],
)
def test_inputs_that_cannot_hold_are_refused(
    tenants: list[TenantQuota], nodes: list[NodeResources], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        plan_replica_limits(tenants, nodes)


def test_quota_fields_are_validated() -> None:
    with pytest.raises(ValueError, match="slo_class"):
        TenantQuota("x", "premium", "text")
    with pytest.raises(ValueError, match="active_thread_percentage"):
        TenantQuota("x", "batch", "text", active_thread_percentage=120)
    with pytest.raises(ValueError, match="max_concurrency"):
        TenantQuota("x", "batch", "text", max_concurrency=0)
    with pytest.raises(ValueError, match="throttle_level"):
        TenantQuota("x", "batch", "text", throttle_level=0.0)


def test_what_a_throttled_tenant_gives_up_goes_to_the_unthrottled_tenants_without_a_set_share() -> None:
    quotas = [
        TenantQuota("a", "latency_critical", "text", active_thread_percentage=30),
        TenantQuota("b", "batch", "text", throttle_level=0.5),
        TenantQuota("c", "standard", "text"),
    ]
    assert kv_fractions(quotas) == {"a": 0.3, "b": 0.175, "c": 0.525}  # 30, 35 × ½, 35 + 17.5
    (plan,) = plan_replica_limits(quotas, [NodeResources("cpu1", 2, replicas=(ReplicaPlacement("r1", "text"),))])
    assert plan.cpu_millicores is None  # the pool still holds the whole node: nobody else is capped


def test_kv_fractions_past_the_device_serve_the_guaranteed_classes_first() -> None:
    quotas = [
        chat(),
        bulk(active_thread_percentage=90),
        TenantQuota("b2", "batch", "text", active_thread_percentage=45),
    ]
    assert kv_fractions(quotas) == pytest.approx({"chat": 0.3, "bulk": 0.7 * 90 / 135, "b2": 0.7 * 45 / 135})
