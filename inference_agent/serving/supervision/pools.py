"""The pools a node runs: from the agent's ``--pools`` setting, and from the control plane's ``desired`` state.

``--pools "text-small=text:1,classify-small=classify:2"`` is NAME=KIND:REPLICAS, comma-separated. The control plane's
desired state (``wire.control.DesiredState``, the ingest answer's ``desired``) takes over the replicas as soon
as it carries ``pools`` (the autoscaler's part), and sets each replica's device limits with ``pool_limits`` (the
isolation enforcer's part)::

    {"pools": {"text-small": {"replicas": 2, "kind": "text"}},
     "pool_limits": {"text-small": {"active_thread_percentage": 50, "gpu_memory_mib": 8192, "cpu_share": 0.125}}}

``kind`` defaults to the pool's current kind (else ``text``). Every limit is optional: the two GPU fields are MPS
quotas (a change replaces the pool's replicas: a running MPS client keeps the limits it started with), and
``cpu_share`` is each replica's CPU cap as a fraction of the node's cores, changed in place: 0.125 on 2 cores →
250 millicores (at least 10: the kernel's smallest quota, 1 ms of each 100 ms period). A pool absent from
``pool_limits`` is not limited.

Every field is checked where the desired state enters (``wire.control``: a bad value is refused as
``Malformed``, and so is one naming more than ``wire.control.MAX_POOLS`` pools), and the replicas against the
node (``desired_refusal``): at most ``max_replicas`` in all. A state past a bound is refused as a whole, and the node
keeps running what it runs: trimming it (which 64 of 64,000 replicas?) would run a state nobody asked for, while the
control plane believes its own, so the operator gets one clear line and a counted refusal instead.

A pool that names an ``engine`` runs one of the node's declared engine profiles (``inference_agent.config``) with a
``model`` from its list; one naming an engine the node did not declare, a model outside its list, a built-in pool
on a node that offers no built-in engine, or more GPUs per replica than the node has is refused the same way
(UnknownEngine, UnknownModel, TooManyGpus): nothing of it starts, and the node's report says why. A pool restated
without ``engine`` or ``kind`` keeps what it runs now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from inference_agent.serving.supervision.quota import GpuQuota
from wire.builtin_engines import BUILTIN_ENGINES, BuiltinEngine
from wire.control import NAME_PATTERN, DesiredState, EngineOffer, PoolDesired, PoolLimits

BUILTIN_OFFERS: Mapping[str, EngineOffer] = {e.value: EngineOffer(serves=e.value) for e in BuiltinEngine}
POOL_NAME = re.compile(NAME_PATTERN)
MAX_REPLICAS_PER_NODE = 64  # the agent's max_replicas setting, by default
# wire.control.MAX_POOLS bounds the pools of a desired state (past it, Malformed): a pool costs a route, a
# queue and 6 series in /metrics even at 0 replicas, so 256 pools → 1,536 series at most.
MIN_CPU_MILLICORES = 10


class RefusalReason(StrEnum):
    """Why a desired state was refused as a whole (a metric label)."""

    MALFORMED = "Malformed"  # a field the agent knows holds a bad value (wire.control names it)
    TOO_MANY_REPLICAS = "TooManyReplicas"
    UNKNOWN_ENGINE = "UnknownEngine"  # an engine profile (or the built-in engines) this node did not declare
    UNKNOWN_MODEL = "UnknownModel"  # a model the profile does not list
    TOO_MANY_GPUS = "TooManyGpus"  # more GPUs per replica than the node has


class DesiredRefused(ValueError):
    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class PoolSpec:
    """A pool as the node runs it: ``kind`` is the API its replicas answer (and, without ``engine``, the built-in
    engine they run); ``engine`` a declared profile with its ``model``; ``gpus`` each replica gets, when the node has
    GPUs (None: replicas share the node's GPUs, as built-in replicas started by ``--pools`` do)."""

    replicas: int
    kind: str = "text"
    gpu_quota: GpuQuota = field(default_factory=GpuQuota)
    cpu_millicores: int | None = None  # each replica's CPU cap; None: uncapped
    engine: str | None = None
    model: str | None = None
    gpus: int | None = None
    gpu_memory_mib: int | None = None

    @property
    def runs(self) -> str:
        """What a replica of the pool runs; a change replaces the replicas: ``text``, ``vllm:Qwen/Qwen2.5-7B@2``."""
        if self.engine is None:
            return self.kind
        gpus = "" if self.gpus is None else f"@{self.gpus}"
        memory = "" if self.gpu_memory_mib is None else f"/{self.gpu_memory_mib}MiB"
        return f"{self.engine}:{self.model or ''}{gpus}{memory}"


@dataclass(frozen=True)
class NodeOffer:
    """What this node can run, which a desired state is checked against: its engines (the built-in ones when it runs
    the built-in workload, and its profiles), its GPUs and its replica bound."""

    engines: Mapping[str, EngineOffer]
    gpus: int = 0
    max_replicas: int = MAX_REPLICAS_PER_NODE


def parse_pools(text: str) -> dict[str, PoolSpec]:
    """``"a=text:1,b=classify:2"`` → {"a": PoolSpec(1, "text"), "b": PoolSpec(2, "classify")}."""
    pools: dict[str, PoolSpec] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, rest = item.partition("=")
        kind, _, replicas = rest.partition(":")
        if not POOL_NAME.match(name) or kind not in BUILTIN_ENGINES or not replicas.isdigit():
            kinds = " or ".join(BUILTIN_ENGINES)
            raise ValueError(f"pool {item!r}: use NAME=KIND:REPLICAS with KIND {kinds}, e.g. text-small=text:1")
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
    desired: DesiredState, current: Mapping[str, PoolSpec], offer: NodeOffer
) -> dict[str, PoolSpec] | None:
    """The pools ``desired`` asks for, or None when it says nothing about pools; DesiredRefused when it asks what the
    node cannot or may not run (module docstring). A pool restated without engine or kind keeps what it runs now."""
    refusal = desired_refusal(desired, offer.max_replicas)
    if refusal is not None:
        raise refusal
    if desired.pools is None:
        return None
    return {name: _pool(name, wanted, current.get(name), offer) for name, wanted in desired.pools.items()}


def _pool(name: str, wanted: PoolDesired, now: PoolSpec | None, offer: NodeOffer) -> PoolSpec:
    if wanted.engine is None and wanted.kind is None and now is not None:
        return replace(now, replicas=wanted.replicas)
    engine = wanted.engine or wanted.kind or "text"
    declared = offer.engines.get(engine)
    where = f"pools.{name}"
    if declared is None and wanted.replicas > 0:
        what = f"engine {engine!r}" if wanted.engine else f"the built-in {engine!r} engine"
        raise DesiredRefused(
            RefusalReason.UNKNOWN_ENGINE,
            f"{where}: {what} is not declared on this node (it offers {sorted(offer.engines)})",
        )
    if declared is not None and not declared.takes(wanted.model):
        listed = f"its models are {declared.models}" if declared.models else "it takes no model"
        raise DesiredRefused(
            RefusalReason.UNKNOWN_MODEL, f"{where}: engine {engine!r} may not serve model {wanted.model!r}: {listed}"
        )
    if wanted.gpus is not None and offer.gpus and wanted.gpus > offer.gpus:
        raise DesiredRefused(
            RefusalReason.TOO_MANY_GPUS, f"{where}: {wanted.gpus} GPUs per replica, this node has {offer.gpus}"
        )
    serves = declared.serves if declared is not None else "text"
    return PoolSpec(
        wanted.replicas,
        serves if wanted.engine else engine,
        engine=wanted.engine,
        model=wanted.model,
        gpus=wanted.gpus,
        gpu_memory_mib=wanted.gpu_memory_mib,
    )


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
