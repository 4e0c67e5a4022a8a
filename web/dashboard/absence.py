"""Why a tile shows no value for a metric, in the words the agent logged: a dash alone tells an operator nothing.

The agent's report says why (``NodeReport.absent``: the GPU probe that could not start, what each pool's engine does
not expose); without it the reason is what the collector itself knows (no GPU registered, no pool on the node, a
node reported by Prometheus that does not send the metric) or, last, that the value has not come yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from collector.registry import NodeView
from web.dashboard.units import SOURCE_NAMES
from wire.catalog import BY_NAME, Scope
from wire.control import MetricAbsences

NOT_YET = "not reported yet"
NO_POOL = "serves no pool"
NO_GPU = "no GPU reported"
NO_GPU_SAID = "no GPU"  # the agent said why: the reason is shown once for the page (gpu_reasons), not per tile


def gpu_reason(view: NodeView, absent: MetricAbsences | None) -> str | None:
    """Why the node's agent reads no GPU (``NVML Shared Library Not Found``); None for a node with GPUs, or whose
    agent did not say."""
    if view.gpus or any(s.device is not None for s in view.series):
        return None
    return absent.gpu if absent is not None else None


def gpu_absence(view: NodeView, absent: MetricAbsences | None, *, with_reason: bool = True) -> str | None:
    """``no GPU (NVML Shared Library Not Found)`` when the agent said why it reads no GPU (``no GPU`` without
    ``with_reason``), ``no GPU reported`` for a node with neither GPUs nor GPU series; None for a node with GPUs."""
    if view.gpus or any(s.device is not None for s in view.series):
        return None
    reason = gpu_reason(view, absent)
    if reason is not None:
        return f"no GPU ({reason})" if with_reason else NO_GPU_SAID
    return NO_GPU


def gpu_summary(view: NodeView, absent: MetricAbsences | None, *, with_reason: bool = True) -> str:
    """What a node's header says of its GPUs: ``2 GPUs``, or why it has none (``gpu_absence``)."""
    count = len({g.index for g in view.gpus} | {s.device for s in view.series if s.device is not None})
    return gpu_absence(view, absent, with_reason=with_reason) or f"{count} GPU{'' if count == 1 else 's'}"


def gpu_reasons(reasons: Mapping[str, str | None]) -> list[tuple[str, int]]:
    """Each reason nodes give for reading no GPU (node → ``gpu_reason``), with how many give it, the most first:
    a CPU-only fleet of 36 tiles says "36 nodes report no GPU: …" once instead of in every tile and cell."""
    counted = Counter(reason for reason in reasons.values() if reason is not None)
    return sorted(counted.items(), key=lambda found: (-found[1], found[0]))


def node_pools(view: NodeView) -> list[str]:
    """The pools the node reports replica series of (a GPU row naming its pod's pool is not one)."""
    return sorted({s.pool for s in view.series if s.pool is not None and s.device is None})


def why_absent(name: str, view: NodeView, absent: MetricAbsences | None, *, with_reason: bool = True) -> str:
    """Why the node's tile has no value for the catalog metric ``name``.

    Worked: a CPU node whose agent found no NVML → GPU util "no GPU (NVML Shared Library Not Found)"; a node of a
    TGI pool → KV cache "tgi exposes no KV-cache metric" (of two pools, each named: "chat: …; vision: …"); a node
    that Prometheus remote write reports, sending no queue depth → "not sent by Prometheus remote write"."""
    scope = BY_NAME[name].scope
    if scope is Scope.GPU:
        gpu = gpu_absence(view, absent, with_reason=with_reason)
        if gpu is not None:
            return gpu
    if scope is Scope.POOL_REPLICA:
        pools = node_pools(view)
        if not pools:
            return NO_POOL
        reasons = _pool_reasons(name, pools, absent)
        if reasons:
            return reasons
    if view.source in SOURCE_NAMES:
        return f"not sent by {SOURCE_NAMES[view.source]}"
    return NOT_YET


def _pool_reasons(name: str, pools: Sequence[str], absent: MetricAbsences | None) -> str | None:
    """``chat: tgi exposes no KV-cache metric`` (one pool), one such part per pool that said why, or None."""
    if absent is None:
        return None
    found = [(pool, absent.pools[pool][name]) for pool in pools if name in absent.pools.get(pool, {})]
    if len(pools) == 1 and found:
        return found[0][1]
    return "; ".join(f"{pool}: {reason}" for pool, reason in found) or None
