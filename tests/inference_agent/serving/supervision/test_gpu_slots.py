"""GPU bookkeeping: the lowest free GPUs to each replica asking some, none to one asking none, a wait when short."""

from __future__ import annotations

from inference_agent.serving.supervision.gpu_slots import GpuSlots


def test_replicas_get_the_lowest_free_gpus_and_wait_when_too_few_are_free() -> None:
    slots = GpuSlots({0: 81_559, 1: 81_559, 2: 40_960})
    assert slots.take("a", 1) == (0,)
    assert slots.take("b", 1) == (1,)
    assert slots.take("c", 2) is None  # only GPU 2 is free
    slots.release("a")
    assert slots.take("c", 2) == (0, 2)
    assert slots.totals_mib((0, 2)) == [81_559, 40_960]


def test_a_replica_asking_no_gpus_or_a_node_without_gpus_shares() -> None:
    assert GpuSlots({0: 1024}).take("a", None) == ()
    assert GpuSlots({}).take("a", 2) == ()
    assert len(GpuSlots({})) == 0
