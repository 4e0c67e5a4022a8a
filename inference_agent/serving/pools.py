"""The pools a node runs: from the agent's ``--pools`` setting, and from the control plane's ``desired`` state.

``--pools "text-small=text:1,classify-small=classify:2"`` is NAME=KIND:REPLICAS, comma-separated. The control plane's
desired state (``collector.control.DesiredState``, the ingest answer's ``desired``) takes over the replicas as soon
as it carries ``pools`` (the autoscaler's part), and sets each replica's device limits with ``pool_limits`` (the
isolation enforcer's part)::

    {"pools": {"text-small": {"replicas": 2, "kind": "text"}},
     "pool_limits": {"text-small": {"active_thread_percentage": 50, "gpu_memory_mib": 8192, "cpu_share": 0.125}}}

``kind`` defaults to the pool's current kind (else ``text``). Every limit is optional: the two GPU fields are MPS
quotas (a change replaces the pool's replicas: a running MPS client keeps the limits it started with), and
``cpu_share`` is each replica's CPU cap as a fraction of the node's cores, changed in place: 0.125 on 2 cores →
250 millicores (at least 10: the kernel's smallest quota, 1 ms of each 100 ms period). A pool absent from
``pool_limits`` is not limited.

Every field is checked where the desired state enters (``collector.control``: a bad value is refused as
``Malformed``, and so is one naming more than ``collector.control.MAX_POOLS`` pools), and the replicas against the
node (``desired_refusal``): at most ``max_replicas`` in all. A state past a bound is refused as a whole, and the node
keeps running what it runs: trimming it (which 64 of 64,000 replicas?) would run a state nobody asked for, while the
control plane believes its own, so the operator gets one clear line and a counted refusal instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from collector.control import NAME_PATTERN, DesiredState, PoolLimits
from inference_agent.serving.replica_quota import GpuQuota

KINDS = ("text", "classify")
POOL_NAME = re.compile(NAME_PATTERN)
MAX_REPLICAS_PER_NODE = 64  # the agent's max_replicas setting, by default
# collector.control.MAX_POOLS bounds the pools of a desired state (past it, Malformed): a pool costs a route, a
# queue and 6 series in /metrics even at 0 replicas, so 256 pools → 1,536 series at most.
MIN_CPU_MILLICORES = 10


class RefusalReason(StrEnum):
    """Why a desired state was refused as a whole (a metric label)."""

    MALFORMED = "Malformed"  # a field the agent knows holds a bad value (collector.control names it)
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


def desired_refusal(desired: DesiredState, max_replicas: int) -> DesiredRefused | None:
    """Why ``desired`` asks more replicas than a node runs, or None: 2 pools × 40 replicas with ``max_replicas`` 64 →
    TooManyReplicas (80 > 64). The pool count was bounded where it was parsed (``MAX_POOLS``: Malformed)."""
    if desired.replicas > max_replicas:
        return DesiredRefused(
            RefusalReason.TOO_MANY_REPLICAS,
            f"pools: {desired.replicas} replicas in all, this node runs at most {max_replicas}",
        )
    return None


def pools_from_desired(
    desired: DesiredState, current: Mapping[str, PoolSpec], max_replicas: int = MAX_REPLICAS_PER_NODE
) -> dict[str, PoolSpec] | None:
    """The pools ``desired`` asks for (a pool's kind left out: what it runs as now, else text), or None when it says
    nothing about pools; DesiredRefused for a count past the node's bounds."""
    refusal = desired_refusal(desired, max_replicas)
    if refusal is not None:
        raise refusal
    if desired.pools is None:
        return None
    return {
        name: PoolSpec(spec.replicas, spec.kind or (current[name].kind if name in current else "text"))
        for name, spec in desired.pools.items()
    }


def with_limits(pools: Mapping[str, PoolSpec], limits: Mapping[str, PoolLimits], cores: int) -> dict[str, PoolSpec]:
    """The pools with their limits in force on a node with ``cores`` cores: cpu_share 0.2 on 2 cores → 400 m."""
    out: dict[str, PoolSpec] = {}
    for name, spec in pools.items():
        lim = limits.get(name, PoolLimits())
        millicores = None if lim.cpu_share is None else max(MIN_CPU_MILLICORES, round(lim.cpu_share * cores * 1000))
        quota = GpuQuota(lim.active_thread_percentage, lim.gpu_memory_mib)
        out[name] = replace(spec, gpu_quota=quota, cpu_millicores=millicores)
    return out


def _replicas(where: str, value: int, most: int) -> int:
    if not 0 <= value <= most:
        raise ValueError(f"{where}.replicas: from 0 to {most}")
    return value
