"""Quota planning, pure: tenants' per-pool quotas and what each node has in, every replica's limits out.

**What a quota means.** ``active_thread_percentage`` and ``gpu_memory_mib`` are a tenant's share *of each device* its
pool runs on (the unit MPS enforces); ``rate_rps``, ``tokens_per_second`` and ``max_concurrency`` are pool-wide
totals, spread over the pool's replicas. None means "not limited". A tenant's *share* is its thread percentage; a
tenant without one gets an equal part of what the pool's other tenants leave of 100 % (at least 1 %), e.g. shares
30 and unset, unset → 30, 35, 35.

**Device limits (MPS).** MPS limits each client process, and a replica is one process serving all its pool's
tenants, so a replica's limits are its tenants' shares summed, capped at the device, and divided over the pool's
replicas on that device; per-tenant shares inside the replica are enforced by admission and KV budgets. Thread
percentages are floored to whole percent (at least 1); memory to the 128-MiB steps MPS enforces, and left unset
when a tenant of the pool has no memory quota (the rest of the device belongs to other pools, so there is no
"rest" to give it). Worked: tenants with 30 % / 16 GiB and 50 % / 40 GiB on one replica of an 80 GiB GPU → 80 % and
57 344 MiB; two replicas of that pool on the same GPU → 40 % and 28 672 MiB each. A device serves at most 48 MPS
clients: a 49th replica raises ValueError naming the node and device.

**CPU.** On a CPU replica the node's cores are the device: its compute share (as above, with the node in place of
the GPU) is a hard cap (cgroup ``cpu.max``, in millicores) when its pool's tenants hold less than 100 % — a batch
tenant given 20 % of a 2-core node → 400 m — and no cap when the pool is unlimited, so idle cores stay usable
(caps are not work-conserving). GPU replicas get no CPU cap: MPS limits their compute. Torch threads split the
node's cores in proportion to the replicas' shares, whole cores, at least 1: 2 cores and two unlimited replicas →
1 thread each; shares 30 % and 50 % on 8 cores → 3 and 5.

**Throttle.** A tenant the enforcer throttled has its share multiplied by its level after the unset shares are
derived, and what it gives up goes to the pool's unthrottled tenants without a set share: unset and unset at level
0.5 → 75 and 25 (the pool keeps its whole device; the throttled tenant's KV budget halves); 30 and unset at level
0.5 → 30 and 35 (nobody takes the rest: the pool's replicas are capped at 65 %).

**KV blocks.** A replica's blocks are split over its tenants in proportion to their shares (largest remainder, so
they add up exactly). When the shares add up past 100 % (batch tenants oversubscribe), latency-critical and then
standard tenants first get blocks × share / 100 and batch tenants split what is left. Worked: 1000 blocks, shares
30 (latency-critical) and 50 (batch) → 375 and 625; shares 30 and 90 → 300 and 700.

**Admission.** A tenant's rate and tokens/s per replica are its pool quota over the pool's replicas (rounded to
0.001); its concurrency is split with the largest remainder in replica order, at least 1 per replica so every
replica the router picks can serve it: 10 over 3 replicas → 4, 3, 3; 2 over 3 → 1, 1, 1 (one over quota, the
price of serving everywhere).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from wire.control import SloClass

__all__ = [
    "MPS_MAX_CLIENTS_PER_DEVICE",
    "SLO_CLASSES",
    "GpuDevice",
    "NodeResources",
    "ReplicaLimits",
    "ReplicaPlacement",
    "TenantLimits",
    "TenantQuota",
    "kv_fractions",
    "plan_replica_limits",
]

SLO_CLASSES = tuple(c.value for c in SloClass)  # in the order declared: also the order KV blocks are guaranteed in
MPS_MAX_CLIENTS_PER_DEVICE = 48  # CUDA MPS on Volta and later
MPS_MEMORY_STEP_MIB = 128
CPU_CAP_FLOOR_MILLICORES = 10  # the kernel's smallest quota: 1 ms of each 100 ms period
_FULL_PERCENT = 100.0


@dataclass(frozen=True)
class TenantQuota:
    """One tenant's quotas on one pool, with its SLO class."""

    tenant: str
    slo_class: str
    pool: str
    active_thread_percentage: float | None = None  # of each device the pool runs on
    gpu_memory_mib: int | None = None  # of each device the pool runs on
    max_concurrency: int | None = None  # pool-wide
    rate_rps: float | None = None  # pool-wide
    tokens_per_second: float | None = None  # pool-wide
    throttle_level: float = 1.0  # the enforcer's level: the share is multiplied by it

    def __post_init__(self) -> None:
        if self.slo_class not in SLO_CLASSES:
            raise ValueError(f"{self.tenant}.slo_class: {self.slo_class!r} is not one of {list(SLO_CLASSES)}")
        share = self.active_thread_percentage
        if share is not None and not 0 < share <= _FULL_PERCENT:
            raise ValueError(f"{self.tenant}.active_thread_percentage: {share} is not in (0, 100]")
        if not 0 < self.throttle_level <= 1:
            raise ValueError(f"{self.tenant}.throttle_level: {self.throttle_level} is not in (0, 1]")
        for name in ("gpu_memory_mib", "max_concurrency", "rate_rps", "tokens_per_second"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{self.tenant}.{name}: {value} is not a number > 0")


@dataclass(frozen=True)
class GpuDevice:
    index: int
    memory_mib: int


@dataclass(frozen=True)
class ReplicaPlacement:
    """A replica on a node: its pool, its GPU (None: CPU only) and the KV-cache blocks its engine has."""

    replica: str
    pool: str
    device: int | None = None
    kv_blocks: int = 0


@dataclass(frozen=True)
class NodeResources:
    node: str
    cpu_cores: int
    gpus: tuple[GpuDevice, ...] = ()
    replicas: tuple[ReplicaPlacement, ...] = ()


@dataclass(frozen=True)
class TenantLimits:
    """What one replica's admission enforces for one tenant."""

    tenant: str
    slo_class: str
    rate_rps: float | None
    tokens_per_second: float | None
    max_concurrency: int | None
    kv_blocks: int


@dataclass(frozen=True)
class ReplicaLimits:
    """One replica's limits: MPS (GPU replicas only), CPU, and its tenants' admission limits."""

    node: str
    replica: str
    pool: str
    device: int | None
    compute_percent: float  # its share of its GPU, or of the node's cores on CPU
    active_thread_percentage: int | None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; None on CPU
    pinned_memory_mib: int | None  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; None: not limited
    cpu_millicores: int | None  # cpu.max on a CPU replica of a limited pool; None: not capped
    torch_threads: int
    tenants: tuple[TenantLimits, ...]


@dataclass(frozen=True)
class _Slot:
    node: NodeResources
    placement: ReplicaPlacement

    @property
    def device_key(self) -> tuple[str, int | None]:
        return self.node.node, self.placement.device


def plan_replica_limits(tenants: Sequence[TenantQuota], nodes: Sequence[NodeResources]) -> tuple[ReplicaLimits, ...]:
    """Every replica's limits, ordered by (node, replica); raises ValueError on inputs that cannot hold."""
    by_pool: dict[str, list[TenantQuota]] = defaultdict(list)
    for quota in tenants:
        by_pool[quota.pool].append(quota)
    _check_unique("tenant quota", [(q.tenant, q.pool) for q in tenants])
    slots = sorted(
        (_Slot(node, placement) for node in nodes for placement in node.replicas),
        key=lambda s: (s.node.node, s.placement.replica),
    )
    _check_unique("replica", [s.placement.replica for s in slots])
    _check_slots(slots)

    pool_on_device = Counter((s.placement.pool, s.device_key) for s in slots)
    compute = {s.placement.replica: _replica_percent(by_pool[s.placement.pool], pool_on_device, s) for s in slots}
    threads = _torch_threads(slots, compute)
    concurrency = _concurrency_split(slots, by_pool)
    pool_size = Counter(s.placement.pool for s in slots)

    plans = []
    for slot in slots:
        placement, quotas = slot.placement, by_pool[slot.placement.pool]
        on_gpu = placement.device is not None
        percent = compute[placement.replica]
        plans.append(
            ReplicaLimits(
                node=slot.node.node,
                replica=placement.replica,
                pool=placement.pool,
                device=placement.device,
                compute_percent=percent,
                active_thread_percentage=max(1, math.floor(percent)) if on_gpu else None,
                pinned_memory_mib=_pinned_memory_mib(quotas, pool_on_device[(placement.pool, slot.device_key)], slot),
                cpu_millicores=None if on_gpu else _cpu_cap(quotas, percent, slot.node.cpu_cores),
                torch_threads=threads[placement.replica],
                tenants=_tenant_limits(quotas, placement, pool_size[placement.pool], concurrency),
            )
        )
    return tuple(plans)


def _check_unique(what: str, keys: Sequence[object]) -> None:
    repeated = sorted(str(key) for key, count in Counter(keys).items() if count > 1)
    if repeated:
        raise ValueError(f"{what} listed twice: {', '.join(repeated)}")


def _check_slots(slots: Sequence[_Slot]) -> None:
    for slot in slots:
        placement, devices = slot.placement, {gpu.index for gpu in slot.node.gpus}
        if placement.device is not None and placement.device not in devices:
            raise ValueError(f"{placement.replica}: node {slot.node.node} has no GPU {placement.device}")
        if placement.kv_blocks < 0:
            raise ValueError(f"{placement.replica}.kv_blocks: {placement.kv_blocks} is negative")
        if slot.node.cpu_cores < 1:
            raise ValueError(f"node {slot.node.node}: cpu_cores {slot.node.cpu_cores} is below 1")
    clients = Counter(s.device_key for s in slots if s.placement.device is not None)
    for (node, device), count in sorted(clients.items(), key=str):
        if count > MPS_MAX_CLIENTS_PER_DEVICE:
            raise ValueError(
                f"node {node} GPU {device}: {count} replicas, MPS serves at most {MPS_MAX_CLIENTS_PER_DEVICE} "
                f"clients per device ({count - MPS_MAX_CLIENTS_PER_DEVICE} too many)"
            )


def _shares(quotas: Sequence[TenantQuota]) -> dict[str, float]:
    """Each tenant's share in percent: unset shares split what the set ones leave, e.g. 30, -, - → 30, 35, 35; a
    throttled tenant's share is multiplied by its level and what it gives up goes to the unthrottled tenants without
    a set share (30, - at 0.5, - → 30, 17.5, 52.5), so throttling one tenant does not cap the others."""
    unset = [q.tenant for q in quotas if q.active_thread_percentage is None]
    taken = sum(q.active_thread_percentage or 0.0 for q in quotas)
    rest = max(1.0, (_FULL_PERCENT - taken) / len(unset)) if unset else 0.0
    base = {q.tenant: rest if q.active_thread_percentage is None else q.active_thread_percentage for q in quotas}
    shares = {q.tenant: base[q.tenant] * q.throttle_level for q in quotas}
    takers = [q.tenant for q in quotas if q.active_thread_percentage is None and q.throttle_level == 1.0]
    freed = sum(base.values()) - sum(shares.values())
    for tenant in takers:
        shares[tenant] += freed / len(takers)
    return shares


def _pool_percent(quotas: Sequence[TenantQuota]) -> float:
    """What a pool's tenants hold of a device together, at most all of it; a pool without tenants holds all."""
    return min(_FULL_PERCENT, sum(_shares(quotas).values())) if quotas else _FULL_PERCENT


def _replica_percent(
    quotas: Sequence[TenantQuota], pool_on_device: Counter[tuple[str, tuple[str, int | None]]], slot: _Slot
) -> float:
    """The replica's compute share of its device: its pool's shares (at most 100 %) over the pool's replicas there."""
    return _pool_percent(quotas) / pool_on_device[(slot.placement.pool, slot.device_key)]


def _pinned_memory_mib(quotas: Sequence[TenantQuota], replicas_on_device: int, slot: _Slot) -> int | None:
    device = slot.placement.device
    if device is None or not quotas or any(q.gpu_memory_mib is None for q in quotas):
        return None
    device_mib = next(gpu.memory_mib for gpu in slot.node.gpus if gpu.index == device)
    pool_mib = min(device_mib, sum(q.gpu_memory_mib or 0 for q in quotas))
    per_replica = pool_mib // replicas_on_device
    return max(MPS_MEMORY_STEP_MIB, per_replica - per_replica % MPS_MEMORY_STEP_MIB)


def _cpu_cap(quotas: Sequence[TenantQuota], percent: float, cores: int) -> int | None:
    """A CPU replica's cap in millicores while its pool is limited: 20 % of 2 cores → 400; None when unlimited."""
    if _pool_percent(quotas) >= _FULL_PERCENT:
        return None
    return max(CPU_CAP_FLOOR_MILLICORES, math.floor(cores * 1000 * percent / _FULL_PERCENT))


def _torch_threads(slots: Sequence[_Slot], compute: dict[str, float]) -> dict[str, int]:
    """Each node's cores in proportion to its replicas' compute shares, in whole threads, at least 1: 30 % and 50 %
    on 8 cores → 3 and 5."""
    by_node: dict[str, list[_Slot]] = defaultdict(list)
    for slot in slots:
        by_node[slot.node.node].append(slot)
    out: dict[str, int] = {}
    for node_slots in by_node.values():
        weights = [compute[s.placement.replica] for s in node_slots]
        split = _apportion(node_slots[0].node.cpu_cores, weights)
        out.update({s.placement.replica: max(1, n) for s, n in zip(node_slots, split, strict=True)})
    return out


def _concurrency_split(slots: Sequence[_Slot], by_pool: dict[str, list[TenantQuota]]) -> dict[tuple[str, str], int]:
    """(replica, tenant) → concurrency: the pool quota in replica order, largest remainder, at least 1 each."""
    replicas_of: dict[str, list[str]] = defaultdict(list)
    for slot in slots:
        replicas_of[slot.placement.pool].append(slot.placement.replica)
    out: dict[tuple[str, str], int] = {}
    for pool, replicas in replicas_of.items():
        for quota in by_pool[pool]:
            if quota.max_concurrency is not None:
                split = _apportion(quota.max_concurrency, [1.0] * len(replicas))
                out.update({(r, quota.tenant): max(1, n) for r, n in zip(replicas, split, strict=True)})
    return out


def _tenant_limits(
    quotas: Sequence[TenantQuota],
    placement: ReplicaPlacement,
    pool_replicas: int,
    concurrency: dict[tuple[str, str], int],
) -> tuple[TenantLimits, ...]:
    budgets = _kv_budgets(placement.kv_blocks, quotas)
    return tuple(
        TenantLimits(
            tenant=q.tenant,
            slo_class=q.slo_class,
            rate_rps=None if q.rate_rps is None else round(q.rate_rps / pool_replicas, 3),
            tokens_per_second=None if q.tokens_per_second is None else round(q.tokens_per_second / pool_replicas, 3),
            max_concurrency=concurrency.get((placement.replica, q.tenant)),
            kv_blocks=budgets[q.tenant],
        )
        for q in sorted(quotas, key=lambda q: q.tenant)
    )


def _kv_budgets(blocks: int, quotas: Sequence[TenantQuota]) -> dict[str, int]:
    """Blocks by :func:`kv_fractions`, whole and adding up: 1000 blocks, 30 (lc) and 90 (batch) → 300, 700."""
    fractions = kv_fractions(quotas)
    names = sorted(fractions)
    return dict(zip(names, _apportion(blocks, [fractions[n] for n in names]), strict=True))


def kv_fractions(quotas: Sequence[TenantQuota]) -> dict[str, float]:
    """Each tenant's fraction of a replica's KV blocks: by share; past 100 % the guaranteed classes first at their
    share and batch tenants split the rest, e.g. 30 (lc) and 90 (batch) → 0.3 and 0.7."""
    shares = _shares(quotas)
    total = sum(shares.values())
    if total <= _FULL_PERCENT:
        return {name: share / total for name, share in shares.items()} if total > 0 else {}
    fractions: dict[str, float] = {}
    left = 1.0
    for slo_class in ("latency_critical", "standard"):
        for quota in sorted((q for q in quotas if q.slo_class == slo_class), key=lambda q: q.tenant):
            fractions[quota.tenant] = min(left, shares[quota.tenant] / _FULL_PERCENT)
            left -= fractions[quota.tenant]
    batch = [q.tenant for q in quotas if q.slo_class == "batch"]
    batch_total = sum(shares[n] for n in batch)
    fractions.update({n: left * shares[n] / batch_total if batch_total else 0.0 for n in batch})
    return fractions


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` into whole parts that add up to it (largest remainder, ties to
    the earlier): 10 by 1, 1, 1 → 4, 3, 3."""
    weight_sum = sum(weights)
    if not weights or weight_sum <= 0:
        return [0] * len(weights)
    exact = [total * w / weight_sum for w in weights]
    parts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (parts[i] - exact[i], i))
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts
