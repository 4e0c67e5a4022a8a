"""The K/V tensors behind the block manager: one store per pool, written by slot and gathered by block table.

Each store is shaped [num_blocks, layers, 2 (K, V), heads, block_size, head_dim], so one block of one sequence is a
single contiguous slice and a swap copies whole blocks. Device pools live on their GPU (or the CPU), the host pool in
(pinned, with CUDA) host memory; attention only ever reads device pools (swapped sequences are not scheduled).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inference_agent.torch_runtime.blocks import BlockMove, BlockRef


@dataclass(frozen=True)
class SlotIndex:
    """Where each of N new tokens' K/V goes, grouped by pool: (pool, rows among the N, block ids, offsets)."""

    groups: tuple[tuple[int, torch.Tensor | None, torch.Tensor, torch.Tensor], ...]


@dataclass(frozen=True)
class TableIndex:
    """Block tables of a batch padded to ``num_blocks`` columns, grouped by pool for the gather."""

    batch: int
    num_blocks: int
    groups: tuple[tuple[int, torch.Tensor | None, torch.Tensor], ...]  # (pool, flat [B·nb] positions, block ids)


class PagedKVCache:
    def __init__(
        self,
        *,
        n_layers: int,
        n_heads: int,
        head_dim: int,
        block_size: int,
        pool_blocks: Sequence[int],
        pool_devices: Sequence[torch.device],
        dtype: torch.dtype,
    ) -> None:
        self.block_size = block_size
        self.devices = list(pool_devices)
        self.compute_device = self.devices[0]
        shape = (n_layers, 2, n_heads, block_size, head_dim)
        pin = self.compute_device.type == "cuda"
        self.stores = [
            torch.zeros((n, *shape), dtype=dtype, device=dev, pin_memory=pin and dev.type == "cpu")
            for n, dev in zip(pool_blocks, self.devices, strict=True)
        ]

    def nbytes(self, pool: int) -> int:
        store = self.stores[pool]
        return store.numel() * store.element_size()

    def copy(self, moves: Sequence[BlockMove]) -> None:
        """Execute a swap plan: one indexed copy per (source pool, destination pool) pair."""
        pairs: dict[tuple[int, int], list[BlockMove]] = defaultdict(list)
        for move in moves:
            pairs[(move.src.pool, move.dst.pool)].append(move)
        for (src_pool, dst_pool), group in pairs.items():
            src = torch.tensor([m.src.block for m in group], device=self.devices[src_pool])
            dst = torch.tensor([m.dst.block for m in group], device=self.devices[dst_pool])
            # host → GPU may overlap (pinned source, same stream); GPU → host must land before the CPU reads it
            to_gpu = self.devices[dst_pool].type == "cuda"
            blocks = self.stores[src_pool].index_select(0, src).to(self.devices[dst_pool], non_blocking=to_gpu)
            self.stores[dst_pool].index_copy_(0, dst, blocks)

    def slot_index(self, slots: Sequence[BlockRef], offsets: Sequence[int]) -> SlotIndex:
        """Index for writing N tokens: token i goes to block ``slots[i]`` at ``offsets[i]``."""
        by_pool: dict[int, list[int]] = defaultdict(list)
        for row, ref in enumerate(slots):
            by_pool[ref.pool].append(row)
        groups = []
        for pool, rows in by_pool.items():
            dev = self.devices[pool]
            blocks = torch.tensor([slots[r].block for r in rows], device=dev)
            offs = torch.tensor([offsets[r] for r in rows], device=dev)
            row_index = None if len(by_pool) == 1 else torch.tensor(rows, device=self.compute_device)
            groups.append((pool, row_index, blocks, offs))
        return SlotIndex(tuple(groups))

    def table_index(self, tables: Sequence[Sequence[BlockRef]]) -> TableIndex:
        """Index for gathering a batch's blocks; short tables are padded with their own first block (masked)."""
        width = max(len(t) for t in tables)
        by_pool: dict[int, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for b, table in enumerate(tables):
            padded = [*table, *[table[0]] * (width - len(table))]
            for j, ref in enumerate(padded):
                by_pool[ref.pool][0].append(b * width + j)
                by_pool[ref.pool][1].append(ref.block)
        groups = []
        for pool, (flat, blocks) in by_pool.items():
            flat_index = None if len(by_pool) == 1 else torch.tensor(flat, device=self.compute_device)
            groups.append((pool, flat_index, torch.tensor(blocks, device=self.devices[pool])))
        return TableIndex(len(tables), width, tuple(groups))

    def write(self, layer: int, index: SlotIndex, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the K/V of N tokens ([N, heads, head_dim] each) into their slots."""
        for pool, rows, blocks, offsets in index.groups:
            store, dev = self.stores[pool], self.devices[pool]
            k_part = k if rows is None else k.index_select(0, rows)
            v_part = v if rows is None else v.index_select(0, rows)
            store[blocks, layer, 0, :, offsets] = k_part.to(dev)
            store[blocks, layer, 1, :, offsets] = v_part.to(dev)

    def gather(self, layer: int, index: TableIndex) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of a batch as [B, heads, num_blocks · block_size, head_dim] on the compute device."""
        if len(index.groups) == 1 and index.groups[0][1] is None:
            pool, _, blocks = index.groups[0]
            kv = self.stores[pool][blocks, layer].to(self.compute_device)
        else:
            first = self.stores[index.groups[0][0]]
            kv = torch.empty(
                (index.batch * index.num_blocks, *first.shape[2:]), dtype=first.dtype, device=self.compute_device
            )
            for pool, flat, blocks in index.groups:
                assert flat is not None
                kv[flat] = self.stores[pool][blocks, layer].to(self.compute_device)
        # [B·nb, 2, H, bs, D] → [B, H, nb·bs, D] for K and for V
        kv = kv.view(index.batch, index.num_blocks, *kv.shape[1:]).permute(2, 0, 3, 1, 4, 5)
        batch, heads, width = index.batch, kv.shape[2], index.num_blocks * self.block_size
        return kv[0].reshape(batch, heads, width, -1), kv[1].reshape(batch, heads, width, -1)
