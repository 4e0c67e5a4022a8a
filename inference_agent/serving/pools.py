"""The pools a node runs: from the agent's ``--pools`` setting, and from the control plane's ``desired`` state.

``--pools "text-small=text:1,classify-small=classify:2"`` is NAME=KIND:REPLICAS, comma-separated. The control plane's
``desired`` (the ingest answer, CONTRACT section 5) takes over the replicas as soon as it carries ``pools`` (the
autoscaler's part), and sets each replica's device limits with ``pool_limits`` (the isolation enforcer's part)::

    {"pools": {"text-small": {"replicas": 2, "kind": "text"}},
     "pool_limits": {"text-small": {"active_thread_percentage": 50, "gpu_memory_mib": 8192, "cpu_share": 0.125}}}

``kind`` defaults to the pool's current kind (else ``text``). Every limit is optional: the two GPU fields are MPS
quotas (a change replaces the pool's replicas: a running MPS client keeps the limits it started with), and
``cpu_share`` is each replica's CPU cap as a fraction of the node's cores, changed in place: 0.125 on 2 cores →
250 millicores (at least 10: the kernel's smallest quota, 1 ms of each 100 ms period). A pool absent from
``pool_limits`` is not limited.

Every count is bounded where the desired state enters (``desired_refusal``): at most ``MAX_POOLS`` pools and
``max_replicas`` replicas in all. A state past a bound is refused as a whole, and the node keeps running what it
runs: trimming it (which 64 of 64,000 replicas?) would run a state nobody asked for, while the control plane believes
its own, so the operator gets one clear line and a counted refusal instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from inference_agent.serving.replica_quota import GpuQuota

KINDS = ("text", "classify")
POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_REPLICAS_PER_NODE = 64  # the agent's max_replicas setting, by default
# A pool costs a route, a queue and 6 series in /metrics even at 0 replicas: 256 pools → 1,536 series at most.
MAX_POOLS = 256
MIN_CPU_MILLICORES = 10


class RefusalReason(StrEnum):
    """Why a desired state was refused as a whole (a metric label)."""

    TOO_MANY_POOLS = "TooManyPools"
    TOO_MANY_REPLICAS = "TooManyReplicas"


class DesiredRefused(ValueError):
    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class PoolSpec:
    replicas: int
    kind: str = "text"
    gpu_quota: GpuQuota = field(default_factory=GpuQuota)
    cpu_millicores: int | None = None  # each replica's CPU cap; None: uncapped


@dataclass(frozen=True)
class PoolLimits:
    """A pool's per-replica device limits, as ``pool_limits`` gives them."""

    gpu_quota: GpuQuota = field(default_factory=GpuQuota)
    cpu_share: float | None = None  # of the node's cores


def parse_pools(text: str) -> dict[str, PoolSpec]:
    """``"a=text:1,b=classify:2"`` → {"a": PoolSpec(1, "text"), "b": PoolSpec(2, "classify")}."""
    pools: dict[str, PoolSpec] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, rest = item.partition("=")
        kind, _, replicas = rest.partition(":")
        if not POOL_NAME.match(name) or kind not in KINDS or not replicas.isdigit():
            raise ValueError(
                f"pool {item!r}: use NAME=KIND:REPLICAS with KIND text or classify, e.g. text-small=text:1"
            )
        if name in pools:
            raise ValueError(f"pool {name!r} named twice")
        pools[name] = PoolSpec(_replicas(f"pools.{name}", int(replicas), MAX_REPLICAS_PER_NODE), kind)
    return pools


def desired_refusal(desired: Mapping[str, Any], max_replicas: int) -> DesiredRefused | None:
    """Why ``desired`` asks more than a node runs, or None: 1,000 pools → TooManyPools; 2 pools × 40 replicas with
    ``max_replicas`` 64 → TooManyReplicas (80 > 64). Counts only; the shape is checked by the readers below."""
    pools = desired.get("pools")
    if not isinstance(pools, Mapping):
        pools = {}
    limits = desired.get("pool_limits")
    for field_name, body in (("pools", pools), ("pool_limits", limits)):
        if isinstance(body, Mapping) and len(body) > MAX_POOLS:
            return DesiredRefused(RefusalReason.TOO_MANY_POOLS, f"{field_name}: {len(body)} pools, at most {MAX_POOLS}")
    replicas = [spec.get("replicas") for spec in pools.values() if isinstance(spec, Mapping)]
    total = sum(r for r in replicas if isinstance(r, int) and not isinstance(r, bool) and r > 0)
    if total > max_replicas:
        return DesiredRefused(
            RefusalReason.TOO_MANY_REPLICAS, f"pools: {total} replicas in all, this node runs at most {max_replicas}"
        )
    return None


def pools_from_desired(
    desired: Mapping[str, Any], current: Mapping[str, PoolSpec], max_replicas: int = MAX_REPLICAS_PER_NODE
) -> dict[str, PoolSpec] | None:
    """The pools ``desired`` asks for, or None when it says nothing about pools; ValueError names a bad field, and
    DesiredRefused a count past the node's bounds."""
    refusal = desired_refusal(desired, max_replicas)
    if refusal is not None:
        raise refusal
    body = desired.get("pools")
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise ValueError("pools: expected an object of pool name → {replicas, kind}")
    pools: dict[str, PoolSpec] = {}
    for name, spec in body.items():
        where = f"pools.{name}"
        if not isinstance(name, str) or not POOL_NAME.match(name):
            raise ValueError(f"{where}: not a valid pool name")
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected an object")
        replicas = spec.get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise ValueError(f"{where}.replicas: an integer is required")
        kind = spec.get("kind", current[name].kind if name in current else "text")
        if kind not in KINDS:
            raise ValueError(f"{where}.kind: one of {', '.join(KINDS)}")
        pools[name] = PoolSpec(_replicas(where, replicas, max_replicas), kind)
    return pools


def limits_from_desired(desired: Mapping[str, Any]) -> dict[str, PoolLimits]:
    """Each pool's limits in ``desired["pool_limits"]`` (none when absent); ValueError names a bad field. Read after
    ``pools_from_desired``, which refuses more than ``MAX_POOLS`` of them."""
    body = desired.get("pool_limits") or {}
    if not isinstance(body, Mapping):
        raise ValueError("pool_limits: expected an object of pool name → limits")
    limits: dict[str, PoolLimits] = {}
    for name, spec in body.items():
        where = f"pool_limits.{name}"
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected an object")
        quota = GpuQuota(
            _optional_int(f"{where}.active_thread_percentage", spec.get("active_thread_percentage"), 1, 100),
            _optional_int(f"{where}.gpu_memory_mib", spec.get("gpu_memory_mib"), 1, 10**9),
        )
        share = spec.get("cpu_share")
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1):
            raise ValueError(f"{where}.cpu_share: a fraction of the node's cores in (0, 1]")
        limits[str(name)] = PoolLimits(quota, None if share is None else float(share))
    return limits


def with_limits(pools: Mapping[str, PoolSpec], limits: Mapping[str, PoolLimits], cores: int) -> dict[str, PoolSpec]:
    """The pools with their limits in force on a node with ``cores`` cores: cpu_share 0.2 on 2 cores → 400 m."""
    out: dict[str, PoolSpec] = {}
    for name, spec in pools.items():
        lim = limits.get(name, PoolLimits())
        millicores = None if lim.cpu_share is None else max(MIN_CPU_MILLICORES, round(lim.cpu_share * cores * 1000))
        out[name] = replace(spec, gpu_quota=lim.gpu_quota, cpu_millicores=millicores)
    return out


def _replicas(where: str, value: int, most: int) -> int:
    if not 0 <= value <= most:
        raise ValueError(f"{where}.replicas: from 0 to {most}")
    return value


def _optional_int(where: str, value: Any, low: int, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{where}: an integer from {low} to {high}")
    return value
