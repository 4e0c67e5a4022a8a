"""The tenants part of what each agent should enforce: every tenant's SLO class and its admission limits per pool,
as that node's share of the pool's quota and multiplied by the tenant's throttle level there, each pool's device
limits, and every tenant key's digest.

It is a :class:`fleet.desired.board.DesiredPart` of :class:`wire.control.DesiredState`: ``common`` is what every
node is told (every tenant's class and whole quotas, the pool limits of a CPU node running none of the pools, the
keys), ``nodes`` only what differs on a node (its shares, its throttles, its pools' limits), so the snapshot grows
with the replicas and throttles, not with nodes × tenants × pools. :class:`TenantsInputs` builds it, pure;
:class:`TenantsPublisher` reads its inputs and publishes it on the board: every enforcer tick
(:mod:`isolation.enforcer`) and at once after an API change of tenants, quotas or keys. The merged answer of a node
reads (``DesiredState.model_dump(exclude_none=True)``)::

    {"tenants": {"acme": {"slo_class": "latency_critical",
                          "quotas": {"chat": {"rate_rps": 5.0, "burst": 5.0, "max_concurrency": 4,
                                              "tokens_per_second": 800.0, "token_burst": 800.0,
                                              "kv_share": 0.3}}}},
     "pool_limits": {"chat": {"cpu_share": 0.2, "active_thread_percentage": 20, "gpu_memory_mib": 8192}},
     "tenant_keys": {"<sha256 hex of a tenant key>": "acme"}}

**Share.** A quota's rate and concurrency are pool-wide; a node is told what its replicas of the pool get from
:func:`isolation.planning.plan_replica_limits` (ready and starting replicas on the up nodes): 10 rps and 10 in
flight over 3 replicas, 2 of them on node-a → node-a 6.666 rps and 7, node-b 3.333 rps and 3. A node running none
of the pool's replicas is told the whole quota (the pool-wide bound still holds for a replica that starts there).

**Throttle.** A tenant throttled on a node's pool (:mod:`isolation.enforcer`) has its rate and concurrency there
multiplied by its level, never below 1 request in flight; an unset concurrency counts as the agent's default of 64,
so a throttle bites on a tenant without a quota too (level 0.5 → 32). A throttled tenant the control plane never
named is told with the agent's default class, ``standard``.

A field a quota leaves unset is otherwise left out (the agent keeps its default); ``burst`` is one second's worth of
the rate and at least one request (0.5 rps → 1, 20 rps → 20); ``token_burst`` is one second of tokens/s. Where a
pool has several tenants, each gets ``kv_share``, its fraction of every replica's KV blocks when they are contended
(:func:`isolation.planning.kv_fractions` over shares times throttle levels): shares 30 and unset → 0.3 and 0.7.

**Pool limits.** Each replica's device limits on the node, from :func:`isolation.planning.plan_replica_limits` over
that node alone with its throttle levels applied to the tenants' shares: the MPS thread percentage and pinned memory
of a GPU replica (its replicas spread over the node's GPUs in turn), and ``cpu_share``, a CPU replica's cap as a
fraction of the node's cores (the server does not know a node's cores; the agent multiplies by its own: 0.2 on
2 cores → 400 millicores). A pool whose tenants hold the whole device gets no limit; a pool with tenants that the
node does not run yet is planned as one replica, so a replica starting there has its limits from the start.

**Keys.** ``tenant_keys`` carries the digest of every tenant's every key to every node, like ``tenants`` names every
tenant: a client may reach any node its gateway or DNS picks, and the pools a node serves move, so a node told only
its pools' tenants would refuse a key the moment a replica lands there. It is bounded by the store (16 keys a
tenant, and ``MAX_TENANT_KEYS`` in all, what an agent takes; 100 tenants with 2 keys each → 200 digests, about
16 KB), never by a caller.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from sqlalchemy import Connection

from collector.registry import node_gpus
from fleet.desired.board import DesiredBoard, DesiredPart, Part
from fleet.view import FleetReader, FleetView
from isolation.events import EnforcementStore, ThrottleLevel
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
from isolation.tenant_keys import TenantKeyStore
from isolation.tenants import QuotaSpec, Tenant, TenantStore
from wire.control import DesiredState, PoolLimits, QuotaDesired, SloClass, TenantDesired

# The agent's defaults for what it is not told (inference_agent.serving.frontend.admission; a test holds them equal).
AGENT_DEFAULT_MAX_CONCURRENCY = 64
AGENT_DEFAULT_SLO_CLASS = SloClass.STANDARD
RATE_FLOOR_RPS = 0.001  # the planner's rounding step: a throttled rate never reaches 0

NodePool = tuple[str, str]
NodePoolTenant = tuple[str, str, str]
Levels = Mapping[tuple[str, str], float]  # (pool, tenant) → its throttle level on one node


@dataclass(frozen=True)
class AdmissionLimits:
    """A tenant's admission limits on one node's pool (None: not limited)."""

    rate_rps: float | None
    max_concurrency: int | None
    tokens_per_second: float | None = None


@dataclass(frozen=True)
class TenantsInputs:
    """Everything the tenants part is made of, read once for all nodes: tenants and standing levels, what each up
    node runs and has, and the keys; :meth:`part` builds it."""

    tenants: Sequence[Tenant]
    levels: Sequence[ThrottleLevel] = ()
    replicas: Mapping[NodePool, int] = field(default_factory=dict)  # (node, pool) → ready and starting replicas
    gpus: Mapping[str, Sequence[GpuDevice]] = field(default_factory=dict)  # node → its GPUs
    keys: Mapping[str, str] = field(default_factory=dict)  # every live key's digest → its tenant

    def part(self) -> DesiredPart:
        """What every node is told and, per node, what differs from it; empty while there is no tenant (nothing is
        limited, nor is anyone throttled: with nobody named there is nobody to protect)."""
        if not self.tenants:
            return DesiredPart()
        common = DesiredState(
            pool_limits=self._pool_limits(None, self._planned({})),
            tenants={t.name: TenantDesired(slo_class=t.slo_class, quotas=q) for t, q in self._whole},
            tenant_keys=dict(self.keys),
        )
        nodes = {node: own for node in self._nodes() if not (own := self._differs(node, common)).is_empty()}
        return DesiredPart(common, nodes)

    @cached_property
    def shares(self) -> dict[NodePoolTenant, AdmissionLimits]:
        return node_shares(self.tenants, self.replicas)

    @cached_property
    def _levels(self) -> dict[str, dict[tuple[str, str], float]]:
        by_node: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
        for lv in self.levels:
            by_node[lv.node][(lv.pool, lv.tenant)] = lv.level
        return by_node

    @cached_property
    def _pools_by_node(self) -> dict[str, set[str]]:
        by_node: dict[str, set[str]] = defaultdict(set)
        for node, pool in self.replicas:
            by_node[node].add(pool)
        return by_node

    @cached_property
    def _whole(self) -> list[tuple[Tenant, dict[str, QuotaDesired]]]:
        """Every tenant's whole quotas, unthrottled: what a node running none of a pool is told."""
        kv = _kv_shares(self._planned({}))
        return [
            (t, {pool: _admission(_whole(q), 1.0, kv.get((pool, t.name))) for pool, q in t.quotas.items()})
            for t in self.tenants
        ]

    def _nodes(self) -> list[str]:
        """The nodes that may differ from common: those running a pool, or with a tenant throttled."""
        return sorted(set(self._pools_by_node) | set(self._levels))

    def _planned(self, level: Levels) -> list[TenantQuota]:
        return [
            _planned(t, pool, q, level.get((pool, t.name), 1.0)) for t in self.tenants for pool, q in t.quotas.items()
        ]

    def _differs(self, node: str, common: DesiredState) -> DesiredState:
        """The node's quotas and pool limits where they are not common's."""
        level = self._levels.get(node, {})
        planned = self._planned(level)
        limits = self._pool_limits(node, planned)
        pool_limits = {
            pool: mine
            for pool in sorted(set(limits) | set(common.pool_limits))
            if (mine := limits.get(pool, PoolLimits())) != common.pool_limits.get(pool, PoolLimits())
        }
        return DesiredState(tenants=self._tenants_differ(node, level, planned), pool_limits=pool_limits)

    def _tenants_differ(self, node: str, level: Levels, planned: Sequence[TenantQuota]) -> dict[str, TenantDesired]:
        """Only the pools the node runs or has a tenant throttled on can differ from the whole quotas: its shares,
        its levels and the KV shares those move. A tenant throttled where it has no quota (or never named) is told
        the agent's defaults times its level."""
        kv = _kv_shares(planned) if level else {}
        touched = self._pools_by_node.get(node, set()) | {pool for pool, _ in level}
        quotas: dict[str, dict[str, QuotaDesired]] = defaultdict(dict)
        for t, whole in self._whole:
            for pool in sorted(touched & whole.keys()):
                share = self.shares.get((node, pool, t.name), _whole(t.quotas[pool]))
                kv_share = kv.get((pool, t.name)) if level else whole[pool].kv_share
                mine = _admission(share, level.get((pool, t.name), 1.0), kv_share)
                if mine != whole[pool]:
                    quotas[t.name][pool] = mine
        classes = {t.name: t.slo_class for t in self.tenants}
        quota_pools = {t.name: t.quotas.keys() for t in self.tenants}
        for (pool, tenant), lv in sorted(level.items()):
            if pool not in quota_pools.get(tenant, ()):
                quotas[tenant][pool] = _admission(AdmissionLimits(None, None), lv)
        return {
            tenant: TenantDesired(slo_class=classes.get(tenant, AGENT_DEFAULT_SLO_CLASS), quotas=own)
            for tenant, own in quotas.items()
        }

    def _pool_limits(self, node_id: str | None, quotas: Sequence[TenantQuota]) -> dict[str, PoolLimits]:
        """Each pool's per-replica device limits on the node (only pools that are limited at all); ``None``: a CPU
        node running none of the pools."""
        name = node_id or ""  # no node runs a pool or has GPUs under this name
        pools = {q.pool for q in quotas} | self._pools_by_node.get(name, set())
        devices = tuple(self.gpus.get(name, ()))
        placed = [
            ReplicaPlacement(f"{pool}/{i}", pool, devices[i % len(devices)].index if devices else None)
            for pool in sorted(pools)
            for i in range(max(1, self.replicas.get((name, pool), 0)))
        ]
        node = NodeResources(name, cpu_cores=1, gpus=devices, replicas=tuple(placed))
        first: dict[str, ReplicaLimits] = {}
        for plan in plan_replica_limits(quotas, [node]):
            first.setdefault(plan.pool, plan)
        return {pool: limits for pool, plan in sorted(first.items()) if (limits := _device_limits(plan)) is not None}


class TenantsPublisher:
    """Reads what the tenants part is made of and publishes it on the board, the same way after an enforcer tick
    (with the fleet view the tick read) and after an API change (reading the fleet itself)."""

    def __init__(self, fleet: FleetReader, board: DesiredBoard) -> None:
        self.fleet = fleet
        self.board = board
        self.engine = fleet.engine

    def publish(self, now: float, *, view: FleetView | None = None, tenants: Sequence[Tenant] | None = None) -> int:
        """Build the part at ``now`` and publish it when it is not what the board holds; the board's version."""
        return self.board.publish_changed(Part.TENANTS, self.build(now, view=view, tenants=tenants), now=now)

    def build(
        self, now: float, *, view: FleetView | None = None, tenants: Sequence[Tenant] | None = None
    ) -> DesiredPart:
        tenants = TenantStore(self.engine).list() if tenants is None else tenants
        if not tenants:
            return DesiredPart()  # the last tenant deleted: an empty part, and no fleet read
        levels = EnforcementStore(self.engine).levels()
        with self.engine.connect() as conn:
            view = self.fleet.read_with(conn, now) if view is None else view
            inputs = read_inputs(conn, view, tenants, levels, TenantKeyStore(self.engine).digests())
        return inputs.part()


def read_inputs(
    conn: Connection,
    view: FleetView,
    tenants: Sequence[Tenant],
    levels: Sequence[ThrottleLevel],
    keys: Mapping[str, str],
) -> TenantsInputs:
    """The part's inputs from the fleet view: what each up node runs, and the GPUs of those running a pool."""
    replicas = {(p.node_id, p.pool): p.current for p in view.pools_on_nodes if p.current > 0}
    gpus = node_gpus(conn, sorted({node for node, _ in replicas}))
    devices = {
        node: tuple(GpuDevice(g.index, (g.memory_total_bytes or 0) // 2**20) for g in found)
        for node, found in gpus.items()
    }
    return TenantsInputs(tenants, levels, replicas, devices, keys)


def node_shares(tenants: Sequence[Tenant], replicas: Mapping[NodePool, int]) -> dict[NodePoolTenant, AdmissionLimits]:
    """(node, pool, tenant) → the limits of the node's replicas of the pool, summed; ``replicas`` is (node, pool) →
    replicas there."""
    quotas = [_planned(t, pool, q) for t in tenants for pool, q in t.quotas.items()]
    slots: dict[str, list[ReplicaPlacement]] = defaultdict(list)
    for (node, pool), count in sorted(replicas.items()):
        slots[node].extend(ReplicaPlacement(f"{node}/{pool}/{i}", pool) for i in range(count))
    nodes = [NodeResources(node, cpu_cores=1, replicas=tuple(placed)) for node, placed in slots.items()]
    planned: dict[NodePoolTenant, list[TenantLimits]] = defaultdict(list)
    for replica in plan_replica_limits(quotas, nodes):
        for limits in replica.tenants:
            planned[(replica.node, replica.pool, limits.tenant)].append(limits)
    return {key: _summed(parts) for key, parts in planned.items()}


def _summed(parts: Sequence[TenantLimits]) -> AdmissionLimits:
    """One node's replicas of a pool together: 3.333 rps and 4 in flight on each of two → 6.666 rps and 8."""
    first = parts[0]  # a tenant's quota fields are set or unset alike on every replica of its pool
    rate = None if first.rate_rps is None else round(sum(p.rate_rps or 0.0 for p in parts), 3)
    concurrency = None if first.max_concurrency is None else sum(p.max_concurrency or 0 for p in parts)
    tokens = None if first.tokens_per_second is None else round(sum(p.tokens_per_second or 0.0 for p in parts), 3)
    return AdmissionLimits(rate, concurrency, tokens)


def _planned(tenant: Tenant, pool: str, quota: QuotaSpec, level: float = 1.0) -> TenantQuota:
    return TenantQuota(
        tenant=tenant.name,
        slo_class=tenant.slo_class.value,
        pool=pool,
        active_thread_percentage=quota.active_thread_percentage,
        gpu_memory_mib=quota.gpu_memory_mib,
        max_concurrency=quota.max_concurrency,
        rate_rps=quota.rate_rps,
        tokens_per_second=quota.tokens_per_second,
        throttle_level=level,
    )


def _whole(quota: QuotaSpec) -> AdmissionLimits:
    return AdmissionLimits(quota.rate_rps, quota.max_concurrency, quota.tokens_per_second)


def _device_limits(plan: ReplicaLimits) -> PoolLimits | None:
    """One replica's device limits as the agent reads them; None when nothing limits it (the whole device)."""
    threads = plan.active_thread_percentage
    limits = PoolLimits(
        cpu_share=None if plan.cpu_millicores is None else plan.cpu_millicores / 1000,  # the node planned as 1 core
        active_thread_percentage=threads if threads is not None and plan.compute_percent < 100 else None,
        gpu_memory_mib=plan.pinned_memory_mib,
    )
    return None if limits == PoolLimits() else limits


def _kv_shares(quotas: Sequence[TenantQuota]) -> dict[tuple[str, str], float]:
    """(pool, tenant) → its fraction of each replica's KV blocks, where a pool has more than one tenant."""
    by_pool: dict[str, list[TenantQuota]] = defaultdict(list)
    for quota in quotas:
        by_pool[quota.pool].append(quota)
    return {
        (pool, tenant): fraction
        for pool, members in by_pool.items()
        if len(members) > 1
        for tenant, fraction in kv_fractions(members).items()
    }


def _admission(limits: AdmissionLimits, level: float, kv_share: float | None = None) -> QuotaDesired:
    """The agent's quota; at level 0.5, 4 rps and 10 in flight → 2 rps (burst 2) and 5."""
    rate = None if limits.rate_rps is None else max(RATE_FLOOR_RPS, round(limits.rate_rps * level, 3))
    concurrency = limits.max_concurrency
    if level < 1.0:
        concurrency = max(1, math.floor((concurrency or AGENT_DEFAULT_MAX_CONCURRENCY) * level))
    tokens = None if limits.tokens_per_second is None else max(1.0, round(limits.tokens_per_second * level, 3))
    return QuotaDesired(
        rate_rps=rate,
        burst=None if rate is None else max(1.0, rate),
        max_concurrency=concurrency,
        tokens_per_second=tokens,
        token_burst=tokens,
        kv_share=None if kv_share is None else max(0.0001, round(kv_share, 4)),
    )
