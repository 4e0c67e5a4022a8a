"""The tenants part of what each agent should enforce: every tenant's SLO class and its admission limits per pool,
as that node's share of the pool's quota and multiplied by the tenant's throttle level there.

The shape is the one ``inference_agent.serving.admission.QuotaBook.from_desired`` and
``inference_agent.serving.pools.limits_from_desired`` read::

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

**Keys.** ``tenant_keys`` (:class:`inference_agent.serving.tenant_keys.TenantKeyHashes`) carries the digest of every
tenant's every key to every node, like ``tenants`` names every tenant: a client may reach any node its gateway or
DNS picks, and the pools a node serves move, so a node told only its pools' tenants would refuse a key the moment a
replica lands there. It is bounded by the store (16 keys a tenant; 100 tenants with 2 keys each → 200 digests,
about 16 KB), never by a caller.

The answer is computed for every node at once and kept for ``cache_seconds``, since every ingest request asks for
it.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sqlalchemy import Engine

from collector.control import DesiredState
from collector.registry import node_gpus, pools_on_up_nodes
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

# The agent's defaults for what it is not told (inference_agent.serving.admission; a test holds them equal).
AGENT_DEFAULT_MAX_CONCURRENCY = 64
AGENT_DEFAULT_SLO_CLASS = "standard"
RATE_FLOOR_RPS = 0.001  # the planner's rounding step: a throttled rate never reaches 0

NodePool = tuple[str, str]
NodePoolTenant = tuple[str, str, str]


@dataclass(frozen=True)
class AdmissionLimits:
    """A tenant's admission limits on one node's pool (None: not limited)."""

    rate_rps: float | None
    max_concurrency: int | None
    tokens_per_second: float | None = None


@dataclass(frozen=True)
class TenantsAnswer:
    """Everything the tenants part is made of, read once for all nodes: tenants, shares and standing levels, and
    what each node runs and has."""

    tenants: Sequence[Tenant]
    shares: Mapping[NodePoolTenant, AdmissionLimits]  # (node, pool, tenant) → its replicas' limits, summed
    levels: Sequence[ThrottleLevel]
    replicas: Mapping[NodePool, int] = field(default_factory=dict)  # (node, pool) → ready and starting replicas
    gpus: Mapping[str, Sequence[GpuDevice]] = field(default_factory=dict)  # node → its GPUs
    keys: Mapping[str, str] = field(default_factory=dict)  # every live key's digest → its tenant

    def for_node(self, node_id: str) -> dict[str, Any] | None:
        """``{"tenants": {...}, "pool_limits": {...}}`` for the node, or None while there is no tenant and no
        throttle (agent defaults)."""
        level = {(lv.pool, lv.tenant): lv.level for lv in self.levels if lv.node == node_id}
        planned = [
            _planned(t, pool, q, level.get((pool, t.name), 1.0)) for t in self.tenants for pool, q in t.quotas.items()
        ]
        kv = _kv_shares(planned)
        body: dict[str, Any] = {}
        for t in self.tenants:
            quotas = {
                pool: _admission(
                    self.shares.get((node_id, pool, t.name), _whole(q)),
                    level.get((pool, t.name), 1.0),
                    kv.get((pool, t.name)),
                )
                for pool, q in t.quotas.items()
            }
            body[t.name] = {"slo_class": t.slo_class.value, "quotas": quotas}
        for (pool, tenant), lv in sorted(level.items()):
            entry = body.setdefault(tenant, {"slo_class": AGENT_DEFAULT_SLO_CLASS, "quotas": {}})
            entry["quotas"].setdefault(pool, _admission(AdmissionLimits(None, None), lv))
        if not body:
            return None
        return {"tenants": body, "pool_limits": self.pool_limits(node_id, planned), "tenant_keys": self._key_digests}

    @cached_property
    def _key_digests(self) -> dict[str, str]:
        """The wire form of ``keys``, checked once per answer rather than once per ingest request."""
        return DesiredState(tenant_keys=dict(self.keys)).tenant_keys

    @cached_property
    def _pools_by_node(self) -> dict[str, set[str]]:
        """node → the pools it runs, indexed once per answer (every ingest request asks for one node)."""
        by_node: dict[str, set[str]] = defaultdict(set)
        for node, pool in self.replicas:
            by_node[node].add(pool)
        return by_node

    def pool_limits(self, node_id: str, quotas: Sequence[TenantQuota]) -> dict[str, dict[str, Any]]:
        """Each pool's per-replica device limits on the node (only pools that are limited at all)."""
        pools = {q.pool for q in quotas} | self._pools_by_node.get(node_id, set())
        devices = tuple(self.gpus.get(node_id, ()))
        placed = [
            ReplicaPlacement(f"{pool}/{i}", pool, devices[i % len(devices)].index if devices else None)
            for pool in sorted(pools)
            for i in range(max(1, self.replicas.get((node_id, pool), 0)))
        ]
        node = NodeResources(node_id, cpu_cores=1, gpus=devices, replicas=tuple(placed))
        first: dict[str, ReplicaLimits] = {}
        for plan in plan_replica_limits(quotas, [node]):
            first.setdefault(plan.pool, plan)
        return {pool: limits for pool, plan in sorted(first.items()) if (limits := _device_limits(plan))}


def read_answer(engine: Engine, *, now: float, node_down_after_seconds: float) -> TenantsAnswer:
    with engine.connect() as conn:
        on_nodes = pools_on_up_nodes(conn, now=now, down_after_seconds=node_down_after_seconds)
        gpus = node_gpus(conn, sorted({p.node_id for p in on_nodes}))
    replicas = {(p.node_id, p.pool): p.ready + p.starting for p in on_nodes if p.ready + p.starting > 0}
    tenants = TenantStore(engine).list()
    devices = {
        node: tuple(GpuDevice(g.index, (g.memory_total_bytes or 0) // 2**20) for g in found)
        for node, found in gpus.items()
    }
    levels = EnforcementStore(engine).levels()
    keys = TenantKeyStore(engine).digests()
    return TenantsAnswer(tenants, node_shares(tenants, replicas), levels, replicas, devices, keys)


class TenantsDesired:
    """``desired(node_id)`` for the ingest answer: one :class:`TenantsAnswer` read for all nodes per
    ``cache_seconds``, so a thousand agents pushing every few seconds cost a few queries a second.

    Ingest asks from its worker threads, so when the answer expires one thread reads the next while the others keep
    answering with the one a second old: 16 requests each reading it at once took the ingest bench from 3,000 to 900
    rows/s. Only the very first read, with nothing to answer yet, makes the others wait for it.
    """

    def __init__(
        self, engine: Engine, *, node_down_after_seconds: float, cache_seconds: float, clock: Callable[[], float]
    ) -> None:
        self.engine = engine
        self.node_down_after_seconds = node_down_after_seconds
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cached: tuple[float, TenantsAnswer] | None = None
        self._reading = threading.Lock()

    def __call__(self, node_id: str) -> dict[str, Any] | None:
        now = self.clock()
        cached = self._cached
        if cached is None or not self._fresh(cached, now):
            cached = self._refresh(now, stale=cached)
        return cached[1].for_node(node_id)

    def _read(self, now: float) -> TenantsAnswer:
        return read_answer(self.engine, now=now, node_down_after_seconds=self.node_down_after_seconds)

    def _fresh(self, cached: tuple[float, TenantsAnswer], now: float) -> bool:
        return 0 <= now - cached[0] < self.cache_seconds

    def _refresh(self, now: float, *, stale: tuple[float, TenantsAnswer] | None) -> tuple[float, TenantsAnswer]:
        if not self._reading.acquire(blocking=stale is None):
            assert stale is not None  # a blocking acquire always succeeds
            return stale
        try:
            cached = self._cached
            if cached is not None and self._fresh(cached, now):
                return cached  # read by the thread we waited for
            self._cached = (now, self._read(now))
            return self._cached
        finally:
            self._reading.release()


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


def _device_limits(plan: ReplicaLimits) -> dict[str, Any]:
    """One replica's device limits as the agent reads them; empty when nothing limits it (the whole device)."""
    limits: dict[str, Any] = {}
    if plan.cpu_millicores is not None:
        limits["cpu_share"] = plan.cpu_millicores / 1000  # planned with the node as one core
    if plan.active_thread_percentage is not None and plan.compute_percent < 100:
        limits["active_thread_percentage"] = plan.active_thread_percentage
    if plan.pinned_memory_mib is not None:
        limits["gpu_memory_mib"] = plan.pinned_memory_mib
    return limits


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


def _admission(limits: AdmissionLimits, level: float, kv_share: float | None = None) -> dict[str, Any]:
    """The agent's quota body; at level 0.5, 4 rps and 10 in flight → 2 rps (burst 2) and 5."""
    rate = None if limits.rate_rps is None else max(RATE_FLOOR_RPS, round(limits.rate_rps * level, 3))
    body: dict[str, Any] = {"rate_rps": rate}
    if rate is not None:
        body["burst"] = max(1.0, rate)
    concurrency = limits.max_concurrency
    if level < 1.0:
        concurrency = max(1, math.floor((concurrency or AGENT_DEFAULT_MAX_CONCURRENCY) * level))
    if concurrency is not None:
        body["max_concurrency"] = concurrency
    if limits.tokens_per_second is not None:
        tokens = max(1.0, round(limits.tokens_per_second * level, 3))
        body["tokens_per_second"] = tokens
        body["token_burst"] = tokens
    if kv_share is not None:
        body["kv_share"] = max(0.0001, round(kv_share, 4))
    return body
