"""Why a tile shows no value for a metric, in the words the agent logged: a dash alone tells an operator nothing.

The agent's report says why (``NodeReport.absent``: the GPU probe that could not start, what each pool's engine does
not expose); without it the reason is what the collector itself knows (no GPU registered, no pool on the node, a
node reported by Prometheus that does not send the metric) or, last, that the value has not come yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.registry import NodeView
from web.dashboard.units import SOURCE_NAMES
from wire.catalog import BY_NAME, Scope
from wire.control import MetricAbsences

NOT_YET = "not reported yet"
NO_POOL = "serves no pool"
NO_GPU = "no GPU reported"


def gpu_absence(view: NodeView, absent: MetricAbsences | None) -> str | None:
    """``no GPU (NVML Shared Library Not Found)`` when the agent said why it reads no GPU, ``no GPU reported`` for
    a node with neither GPUs nor GPU series; None for a node with GPUs."""
    if view.gpus or any(s.device is not None for s in view.series):
        return None
    if absent is not None and absent.gpu is not None:
        return f"no GPU ({absent.gpu})"
    return NO_GPU


def gpu_summary(view: NodeView, absent: MetricAbsences | None) -> str:
    """What a node's header says of its GPUs: ``2 GPUs``, or why it has none (``gpu_absence``)."""
    count = len({g.index for g in view.gpus} | {s.device for s in view.series if s.device is not None})
    return gpu_absence(view, absent) or f"{count} GPU{'' if count == 1 else 's'}"


def node_pools(view: NodeView) -> list[str]:
    """The pools the node reports replica series of (a GPU row naming its pod's pool is not one)."""
    return sorted({s.pool for s in view.series if s.pool is not None and s.device is None})


def why_absent(name: str, view: NodeView, absent: MetricAbsences | None) -> str:
    """Why the node's tile has no value for the catalog metric ``name``.

    Worked: a CPU node whose agent found no NVML → GPU util "no GPU (NVML Shared Library Not Found)"; a node of a
    TGI pool → KV cache "tgi exposes no KV-cache metric" (of two pools, each named: "chat: …; vision: …"); a node
    that Prometheus remote write reports, sending no queue depth → "not sent by Prometheus remote write"."""
    scope = BY_NAME[name].scope
    if scope is Scope.GPU:
        gpu = gpu_absence(view, absent)
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
