"""The paged KV-cache block manager: fixed-size blocks, a block table per sequence, device pools, then host memory.

Pure Python bookkeeping; the engine moves the actual K/V tensors by the swap plans returned here. Pools 0..G-1 are
the device pools (one per GPU: a sequence's blocks may sit on a peer GPU before it spills), pool G is host memory.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple


class BlockRef(NamedTuple):
    pool: int
    block: int


class BlockMove(NamedTuple):
    """One block's K/V to copy from ``src`` to ``dst`` (a swap plan is a list of these)."""

    src: BlockRef
    dst: BlockRef


class OutOfBlocks(RuntimeError):
    """The pools cannot hold what was asked; nothing was changed."""


@dataclass
class _Pool:
    name: str
    num_blocks: int
    free: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free = list(range(self.num_blocks - 1, -1, -1))  # pop() hands out the lowest id first

    def take(self, count: int) -> list[int]:
        taken = [self.free.pop() for _ in range(count)]
        return taken


@dataclass
class _SeqState:
    table: list[BlockRef]
    num_tokens: int  # token slots written (used); table capacity minus this is the waste
    last_scheduled: int = -1
    swapped: bool = False


class BlockManager:
    """Owns every block of every pool; each block belongs to at most one sequence."""

    def __init__(
        self, block_size: int, device_blocks: Sequence[int], host_blocks: int, device_names: Sequence[str] = ()
    ) -> None:
        if block_size < 1 or not device_blocks or min(device_blocks) < 0 or host_blocks < 0:
            raise ValueError("block_size must be ≥ 1, with at least one device pool and no negative pool size")
        names = list(device_names) or [f"device{i}" for i in range(len(device_blocks))]
        self.block_size = block_size
        self._pools = [_Pool(name, n) for name, n in zip(names, device_blocks, strict=True)]
        self._pools.append(_Pool("host", host_blocks))
        self.host_pool = len(device_blocks)
        self._seqs: dict[str, _SeqState] = {}
        self.swaps_out = 0
        self.swaps_in = 0

    # --- sizes -------------------------------------------------------------------------------------------------
    def blocks_for(self, num_tokens: int) -> int:
        """Blocks holding ``num_tokens`` slots: 33 tokens in blocks of 16 → 3 blocks."""
        return -(-num_tokens // self.block_size)

    @property
    def num_pools(self) -> int:
        return len(self._pools)

    def pool_name(self, pool: int) -> str:
        return self._pools[pool].name

    def total_blocks(self, pool: int) -> int:
        return self._pools[pool].num_blocks

    def free_blocks(self, pool: int) -> int:
        return len(self._pools[pool].free)

    def free_device_blocks(self) -> int:
        return sum(self.free_blocks(p) for p in range(self.host_pool))

    def total_device_blocks(self) -> int:
        return sum(self.total_blocks(p) for p in range(self.host_pool))

    def used_device_blocks(self) -> int:
        return self.total_device_blocks() - self.free_device_blocks()

    def free_host_blocks(self) -> int:
        return self.free_blocks(self.host_pool)

    # --- per sequence ------------------------------------------------------------------------------------------
    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def sequences(self) -> list[str]:
        return list(self._seqs)

    def block_table(self, seq_id: str) -> tuple[BlockRef, ...]:
        return tuple(self._seqs[seq_id].table)

    def num_tokens(self, seq_id: str) -> int:
        return self._seqs[seq_id].num_tokens

    def is_swapped(self, seq_id: str) -> bool:
        return self._seqs[seq_id].swapped

    def blocks_needed(self, seq_id: str, extra_tokens: int = 1) -> int:
        """New blocks that appending ``extra_tokens`` would take: 32 tokens in 2 full blocks + 1 → 1."""
        state = self._seqs[seq_id]
        return max(0, self.blocks_for(state.num_tokens + extra_tokens) - len(state.table))

    def allocate(self, seq_id: str, num_tokens: int, *, reserve_tokens: int = 0) -> None:
        """Give a new sequence blocks for ``num_tokens`` written slots, or for ``reserve_tokens`` if more (a naive
        server reserving the full max length up front)."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} already has blocks")
        if num_tokens < 1:
            raise ValueError(f"a sequence needs at least one token, got {num_tokens}")
        blocks = self._take_device(self.blocks_for(max(num_tokens, reserve_tokens)), home=None)
        self._seqs[seq_id] = _SeqState(table=blocks, num_tokens=num_tokens)

    def append(self, seq_id: str, count: int = 1) -> None:
        """Mark ``count`` more slots written, taking a block on demand when the last one is full."""
        state = self._seqs[seq_id]
        if state.swapped:
            raise RuntimeError(f"sequence {seq_id!r} is swapped out; swap it in before appending")
        needed = self.blocks_needed(seq_id, count)
        if needed:
            state.table.extend(self._take_device(needed, home=state.table[0].pool if state.table else None))
        state.num_tokens += count

    def free(self, seq_id: str) -> int:
        """Return every block of a finished sequence at once; answers how many."""
        state = self._seqs.pop(seq_id)
        for ref in state.table:
            self._pools[ref.pool].free.append(ref.block)
        return len(state.table)

    def touch(self, seq_id: str, step: int) -> None:
        """Record that the sequence was scheduled at ``step`` (what makes it hot)."""
        self._seqs[seq_id].last_scheduled = step

    def coldest(self, exclude: Collection[str] = ()) -> str | None:
        """The device-resident sequence scheduled least recently (first allocated on a tie), or None."""
        candidates = [(s.last_scheduled, sid) for sid, s in self._seqs.items() if not s.swapped and sid not in exclude]
        return min(candidates, key=lambda c: c[0])[1] if candidates else None

    # --- tiers -------------------------------------------------------------------------------------------------
    def swap_out(self, seq_id: str) -> list[BlockMove]:
        """Move a sequence's blocks to host memory; the returned plan says which K/V to copy where."""
        state = self._seqs[seq_id]
        if state.swapped:
            raise RuntimeError(f"sequence {seq_id!r} is already swapped out")
        host = self._pools[self.host_pool]
        if len(host.free) < len(state.table):
            raise OutOfBlocks(f"host pool has {len(host.free)} free blocks, {seq_id!r} needs {len(state.table)}")
        targets = [BlockRef(self.host_pool, i) for i in host.take(len(state.table))]
        plan = [BlockMove(ref, dst) for ref, dst in zip(state.table, targets, strict=True)]
        self._release_and_remap(state, plan)
        state.swapped = True
        self.swaps_out += 1
        return plan

    def swap_in(self, seq_id: str) -> list[BlockMove]:
        """Bring a swapped-out sequence back to the device pools; the plan copies host blocks to device blocks."""
        state = self._seqs[seq_id]
        if not state.swapped:
            raise RuntimeError(f"sequence {seq_id!r} is not swapped out")
        targets = self._take_device(len(state.table), home=None)
        plan = [BlockMove(ref, dst) for ref, dst in zip(state.table, targets, strict=True)]
        self._release_and_remap(state, plan)
        state.swapped = False
        self.swaps_in += 1
        return plan

    def _release_and_remap(self, state: _SeqState, plan: list[BlockMove]) -> None:
        for move in plan:
            self._pools[move.src.pool].free.append(move.src.block)
        state.table = [move.dst for move in plan]

    def _take_device(self, count: int, home: int | None) -> list[BlockRef]:
        """``count`` device blocks, all or none: the home pool first, then the peers with the most free blocks."""
        if count > self.free_device_blocks():
            raise OutOfBlocks(f"device pools have {self.free_device_blocks()} free blocks, {count} needed")
        order = sorted(range(self.host_pool), key=lambda p: (p != home, -self.free_blocks(p), p))
        taken: list[BlockRef] = []
        for pool in order:
            grab = min(count - len(taken), self.free_blocks(pool))
            taken.extend(BlockRef(pool, i) for i in self._pools[pool].take(grab))
        return taken

    # --- measures ----------------------------------------------------------------------------------------------
    def allocated_slots(self) -> int:
        return sum(len(s.table) for s in self._seqs.values()) * self.block_size

    def used_slots(self) -> int:
        return sum(s.num_tokens for s in self._seqs.values())

    def fragmentation(self) -> float:
        """Allocated-but-unused token slots over allocated slots: one sequence of 17 tokens in blocks of 16 holds
        32 slots, 15 unused → 0.47; with on-demand allocation only a sequence's last block can be partly empty."""
        allocated = self.allocated_slots()
        return (allocated - self.used_slots()) / allocated if allocated else 0.0
