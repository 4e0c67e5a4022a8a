"""Can a set of quotas hold? Pure checks run before any quota is stored, so a promise the GPUs cannot keep is refused.

Two things cannot hold on a pool, and the refusal says by how much:

- memory: each replica of a pool pins, on the device it runs on, the ``gpu_memory_mib`` of every tenant of the pool
  that has one, so their sum must fit the smallest GPU the pool can run on. Tenants of 49,152 and 40,960 MiB pin
  90,112 MiB; on a GPU of 81,559 MiB that is 8,553 MiB too much.
- compute: the ``active_thread_percentage`` of the guaranteed tenants (latency_critical and standard) must sum to at
  most 100: 60 + 60 is 20 percentage points too many. Batch tenants are best-effort and are not counted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from wire.errors import FieldError

if TYPE_CHECKING:  # the store in isolation.tenants calls these checks; only the types are needed here
    from isolation.tenants import QuotaSpec
    from wire.control import SloClass

FULL_GPU_PERCENT = 100


class QuotaConflict(FieldError):
    """Quotas that cannot hold together: ``field`` is the quota field at fault; the message says by how much."""


def check_quotas(
    quotas: Mapping[tuple[str, str], QuotaSpec],
    classes: Mapping[str, SloClass],
    gpu_mib_by_pool: Mapping[str, int],
) -> None:
    """Raise QuotaConflict for the first pool (by name) whose quotas cannot hold.

    ``quotas`` is keyed (tenant, pool); ``classes`` gives every such tenant's SLO class; ``gpu_mib_by_pool`` the
    memory of the smallest GPU each pool can run on. A pool it does not name runs on no known GPU: its memory
    quotas are not checked (there is nothing to pin them on yet).
    """
    by_pool: dict[str, dict[str, QuotaSpec]] = defaultdict(dict)
    for (tenant, pool), quota in quotas.items():
        by_pool[pool][tenant] = quota
    for pool in sorted(by_pool):
        gpu_mib = gpu_mib_by_pool.get(pool)
        if gpu_mib is not None:
            _check_memory(pool, by_pool[pool].values(), gpu_mib)
        _check_threads(pool, by_pool[pool], classes)


def _check_memory(pool: str, quotas: Iterable[QuotaSpec], gpu_mib: int) -> None:
    pinned = sum(q.gpu_memory_mib or 0 for q in quotas)
    if pinned > gpu_mib:
        raise QuotaConflict(
            "gpu_memory_mib",
            f"tenants of pool {pool} would pin {pinned:,} MiB on a GPU of {gpu_mib:,} MiB "
            f"({pinned - gpu_mib:,} MiB too much)",
        )


def _check_threads(pool: str, quotas: Mapping[str, QuotaSpec], classes: Mapping[str, SloClass]) -> None:
    guaranteed = sum(q.active_thread_percentage or 0 for t, q in quotas.items() if classes[t].guaranteed)
    if guaranteed > FULL_GPU_PERCENT:
        raise QuotaConflict(
            "active_thread_percentage",
            f"guaranteed tenants (latency_critical and standard) of pool {pool} would take {guaranteed}% of the "
            f"GPU's threads, past 100% by {guaranteed - FULL_GPU_PERCENT} percentage points",
        )
