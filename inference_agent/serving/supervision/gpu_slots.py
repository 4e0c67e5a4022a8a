"""Which of the node's GPUs each replica has to itself: the lowest free indices, held until its process is reaped.

Pure bookkeeping, no NVML: the GPUs are the inventory the agent read at start (index → total memory). A replica of a
pool that asks ``gpus`` per replica gets that many no live replica holds (``CUDA_VISIBLE_DEVICES``), or waits; one
of a pool that asks none (a built-in pool started by ``--pools``), or on a node without GPUs, gets none and shares.
Worked: 3 GPUs, replicas asking 1, 1, 2 → (0,), (1,), then None (only GPU 2 is free) until one is released.
"""

from __future__ import annotations

from collections.abc import Mapping


class GpuSlots:
    def __init__(self, memory_mib: Mapping[int, int | None]) -> None:
        self.memory_mib = dict(memory_mib)
        self._held: dict[str, tuple[int, ...]] = {}  # by replica id

    def __len__(self) -> int:
        return len(self.memory_mib)

    def free(self) -> list[int]:
        held = {i for gpus in self._held.values() for i in gpus}
        return [i for i in sorted(self.memory_mib) if i not in held]

    def take(self, replica_id: str, wanted: int | None) -> tuple[int, ...] | None:
        """The GPUs ``replica_id`` now holds: () when it asks none or the node has none, None while too few are free."""
        if wanted is None or not self.memory_mib:
            return ()
        free = self.free()
        if len(free) < wanted:
            return None
        self._held[replica_id] = tuple(free[:wanted])
        return self._held[replica_id]

    def release(self, replica_id: str) -> None:
        self._held.pop(replica_id, None)

    def totals_mib(self, gpus: tuple[int, ...]) -> list[int | None]:
        return [self.memory_mib.get(i) for i in gpus]
