"""Placement, pure: which nodes can run a pool at all, how many more replicas a node takes, and the words that say
why fewer than asked were placed."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.placement import Room, shortfall, unfit
from fleet.pools import PoolSpec
from fleet.view import NodeSupply
from tests.autoscaler.stored_nodes import offers
from wire.control import NodeCapabilities

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EU_VLLM = offers({"vllm": [LLAMA]}, {"zone": "eu-1"})


def supply(caps: NodeCapabilities | None, gpus_mib: tuple[int | None, ...] = ()) -> NodeSupply:
    return NodeSupply(caps, None, gpus_mib)


@pytest.mark.parametrize(
    ("spec", "node", "runs_pool", "why"),
    [
        pytest.param({}, supply(offers()), False, None, id="built-in-text-on-any-new-agent"),
        pytest.param({"engine": "classify"}, supply(offers()), False, None, id="built-in-classify"),
        pytest.param({}, supply(None), True, None, id="old-agent-keeps-the-pool-it-runs"),
        pytest.param(
            {},
            supply(None),
            False,
            "declares no engines (an older agent) and does not run the pool",
            id="old-agent-is-sent-no-new-pool",
        ),
        pytest.param({"engine": "vllm", "model": LLAMA}, supply(EU_VLLM), False, None, id="profile-with-its-model"),
        pytest.param(
            {"engine": "sglang", "model": LLAMA},
            supply(EU_VLLM),
            True,
            "engine 'sglang' not declared",
            id="profile-not-declared-even-where-the-pool-runs",
        ),
        pytest.param(
            {"engine": "vllm", "model": "other/model"},
            supply(EU_VLLM),
            False,
            "engine 'vllm' does not offer model 'other/model'",
            id="model-not-listed",
        ),
        pytest.param(
            {"engine": "vllm", "model": LLAMA, "node_selector": {"zone": "us-2", "gpu": "h100"}},
            supply(EU_VLLM),
            False,
            "labels gpu=h100,zone=us-2 not matched",
            id="selector-not-matched",
        ),
        pytest.param(
            {"gpu_memory_mib": 40960},
            supply(offers(), (81920, 24576)),
            False,
            "GPUs of 24576 MiB < 40960 MiB",
            id="a-small-gpu",
        ),
        pytest.param({"gpu_memory_mib": 40960}, supply(offers(), (81920, 81920)), False, None, id="gpus-big-enough"),
        pytest.param(
            {"gpu_memory_mib": 40960}, supply(offers()), False, "no GPUs (needs 40960 MiB each)", id="no-gpus-at-all"
        ),
    ],
)
def test_which_nodes_can_run_a_pool(spec: dict[str, Any], node: NodeSupply, runs_pool: bool, why: str | None) -> None:
    assert unfit(PoolSpec(**spec), node, runs_pool=runs_pool) == why


@pytest.mark.parametrize(
    ("room", "free"),
    [
        pytest.param(Room(4, 1, 1, 1), 2, id="4-gpus-1-held-by-another-pool-1-mine"),
        pytest.param(Room(2, 0, 2, 0), 1, id="2-gpu-replica-on-2-gpus"),
        pytest.param(Room(3, 0, 2, 1), 0, id="1-gpu-left-for-a-2-gpu-replica"),
        pytest.param(Room(4, 6, 1, 0), 0, id="over-committed-by-others"),
    ],
)
def test_the_room_a_node_has_for_more_replicas(room: Room, free: int) -> None:
    assert room.free == free


def test_a_shortfall_says_per_node_why() -> None:
    rooms = {"a": Room(2, 0, 2, 0), "e": Room(4, 3, 1, 0, gpus=False)}
    unfit_nodes = {
        "b": "engine 'vllm' not declared",
        "c": "labels zone=eu-1 not matched",
        "d": "GPUs of 24576 MiB < 40960 MiB",
    }
    assert shortfall(4, {"a": 1, "e": 1}, rooms, unfit_nodes) == (
        "placed 2 of 4 on a: 1, e: 1; no room for 2 on a (0 of 2 GPUs free, 2 per replica), e (0 of 4 CPU slots "
        "free); b: engine 'vllm' not declared; c: labels zone=eu-1 not matched; d: GPUs of 24576 MiB < 40960 MiB"
    )
    assert shortfall(1, {}, {}, {}) == "placed 0 of 1; no node is up"


def test_a_shortfall_over_many_nodes_names_a_few_and_counts_the_rest() -> None:
    unfit_nodes = {f"n{i:02}": "engine 'vllm' not declared" for i in range(20)}
    note = shortfall(1, {}, {}, unfit_nodes)
    assert note.endswith("n05: engine 'vllm' not declared; 14 more")
