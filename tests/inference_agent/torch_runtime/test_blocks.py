"""The block manager: allocation, release, fragmentation and swaps, with property-based operation sequences."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from inference_agent.torch_runtime.blocks import BlockManager, BlockRef, OutOfBlocks

BLOCK = 4


def test_allocation_on_demand_and_release() -> None:
    manager = BlockManager(BLOCK, [4], host_blocks=4)
    manager.allocate("a", 5)  # 5 tokens in blocks of 4 → 2 blocks, 3 slots unused
    assert manager.block_table("a") == (BlockRef(0, 0), BlockRef(0, 1))
    assert manager.fragmentation() == pytest.approx(3 / 8)
    manager.append("a", 3)  # fills the second block exactly
    assert len(manager.block_table("a")) == 2 and manager.fragmentation() == 0.0
    manager.append("a")  # the 9th token opens a third block
    assert len(manager.block_table("a")) == 3
    assert manager.free("a") == 3 and manager.free_device_blocks() == 4


def test_out_of_blocks_changes_nothing() -> None:
    manager = BlockManager(BLOCK, [2], host_blocks=0)
    manager.allocate("a", 8)
    with pytest.raises(OutOfBlocks):
        manager.allocate("b", 1)
    with pytest.raises(OutOfBlocks):
        manager.append("a")
    assert "b" not in manager and manager.num_tokens("a") == 8


def test_reservation_holds_blocks_up_front() -> None:
    manager = BlockManager(BLOCK, [8], host_blocks=0)
    manager.allocate("a", 2, reserve_tokens=16)  # a naive server: 16 slots reserved for 2 used
    assert len(manager.block_table("a")) == 4 and manager.fragmentation() == pytest.approx(14 / 16)


def test_swap_out_moves_the_coldest_to_host_and_back() -> None:
    manager = BlockManager(BLOCK, [3], host_blocks=3)
    manager.allocate("cold", 4)
    manager.allocate("hot", 8)
    manager.touch("cold", 1)
    manager.touch("hot", 2)
    assert manager.coldest() == "cold"
    plan = manager.swap_out("cold")
    assert plan == [(BlockRef(0, 0), BlockRef(1, 0))] and manager.is_swapped("cold")
    assert manager.coldest() == "hot" and manager.free_device_blocks() == 1
    back = manager.swap_in("cold")
    assert [m.src for m in back] == [BlockRef(1, 0)] and back[0].dst.pool == 0
    assert (manager.swaps_out, manager.swaps_in) == (1, 1)


def test_new_sequences_go_to_the_pool_with_most_free_blocks() -> None:
    manager = BlockManager(BLOCK, [2, 2], host_blocks=0)
    manager.allocate("a", 4)  # a tie: the lowest pool, 0
    manager.allocate("b", 8)  # pool 1 has 2 free, pool 0 has 1
    manager.append("a", 4)  # the home pool still has a block
    assert [ref.pool for ref in manager.block_table("a")] == [0, 0]
    assert [ref.pool for ref in manager.block_table("b")] == [1, 1]


def test_a_growing_sequence_spills_to_the_peer() -> None:
    manager = BlockManager(BLOCK, [2, 2], host_blocks=0)
    manager.allocate("a", 8)
    manager.append("a", 4)
    assert [ref.pool for ref in manager.block_table("a")] == [0, 0, 1]


class BlockMachine(RuleBasedStateMachine):
    """Random allocate/append/free/swap sequences; the invariants hold after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.manager = BlockManager(BLOCK, [6, 3], host_blocks=8)
        self.tokens: dict[str, int] = {}
        self.step = 0

    def _ids(self, swapped: bool) -> list[str]:
        return sorted(s for s in self.tokens if self.manager.is_swapped(s) == swapped)

    @rule(name=st.sampled_from("abcdefgh"), tokens=st.integers(1, 20))
    def allocate(self, name: str, tokens: int) -> None:
        if name in self.tokens:
            return
        try:
            self.manager.allocate(name, tokens)
        except OutOfBlocks:
            assert name not in self.manager
            return
        self.tokens[name] = tokens

    @precondition(lambda self: self._ids(swapped=False))
    @rule(data=st.data(), count=st.integers(1, 6))
    def append(self, data: st.DataObject, count: int) -> None:
        name = data.draw(st.sampled_from(self._ids(swapped=False)))
        try:
            self.manager.append(name, count)
        except OutOfBlocks:
            assert self.manager.num_tokens(name) == self.tokens[name]
            return
        self.tokens[name] += count
        self.step += 1
        self.manager.touch(name, self.step)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.tokens)))
        held = len(self.manager.block_table(name))
        free_before = sum(self.manager.free_blocks(p) for p in range(self.manager.num_pools))
        assert self.manager.free(name) == held
        del self.tokens[name]
        assert sum(self.manager.free_blocks(p) for p in range(self.manager.num_pools)) == free_before + held

    @precondition(lambda self: self._ids(swapped=False))
    @rule()
    def swap_out_coldest(self) -> None:
        name = self.manager.coldest()
        assert name is not None
        table = self.manager.block_table(name)
        try:
            plan = self.manager.swap_out(name)
        except OutOfBlocks:
            return
        assert [m.src for m in plan] == list(table)
        assert all(m.dst.pool == self.manager.host_pool for m in plan)

    @precondition(lambda self: self._ids(swapped=True))
    @rule(data=st.data())
    def swap_in(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self._ids(swapped=True)))
        try:
            plan = self.manager.swap_in(name)
        except OutOfBlocks:
            return
        assert all(m.dst.pool != self.manager.host_pool for m in plan)
        assert self.manager.block_table(name) == tuple(m.dst for m in plan)

    @invariant()
    def no_block_owned_twice_and_counts_add_up(self) -> None:
        owned = [ref for s in self.manager.sequences() for ref in self.manager.block_table(s)]
        assert len(owned) == len(set(owned))
        for pool in range(self.manager.num_pools):
            used = sum(1 for ref in owned if ref.pool == pool)
            assert used + self.manager.free_blocks(pool) == self.manager.total_blocks(pool)

    @invariant()
    def tables_fit_tokens_and_fragmentation_matches(self) -> None:
        allocated = used = 0
        for name, tokens in self.tokens.items():
            table = self.manager.block_table(name)
            assert len(table) == -(-tokens // BLOCK)  # on demand: only the last block can be partly empty
            assert len({ref.pool == self.manager.host_pool for ref in table}) <= 1  # all on host, or none
            allocated += len(table) * BLOCK
            used += tokens
        fragmentation = self.manager.fragmentation()
        assert 0.0 <= fragmentation < 1.0
        assert fragmentation == pytest.approx((allocated - used) / allocated if allocated else 0.0)


TestBlockMachine = BlockMachine.TestCase
TestBlockMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
