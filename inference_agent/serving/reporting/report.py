"""The node's report of its own replicas (``wire.control.NodeReport``), built when a push is sent.

Pure: the supervisor's counts per pool and the probe's latest tenant usage in, one report out, with ``ts`` the wall
clock it was taken at. It rides in each ingest body (``pusher.py``) as the node's state now, never stored with the
samples: a spool replayed after an hour's outage carries today's replicas, not the hour-old ones.

Bounded as the wire is: at most ``MAX_POOLS`` pools (pools with replicas first, then by name) and
``MAX_TENANTS_PER_POOL`` tenants a pool (the busiest: most requests/s, then most KV blocks, then by name). The
supervisor never targets more pools than that, so the cut only shows when a pool set is being replaced wholesale.
"""

from __future__ import annotations

from collections.abc import Mapping

from inference_agent.serving.supervision.supervisor import ReplicaCounts
from wire.control import MAX_POOLS, MAX_TENANTS_PER_POOL, NodeReport, PoolReport, TenantUsage


def node_report(
    ts: float, pools: Mapping[str, ReplicaCounts], tenants: Mapping[str, Mapping[str, TenantUsage]]
) -> NodeReport:
    """Worked: {"chat": 2 ready, 1 starting} and acme's usage on chat → {"chat": {"ready": 2, "starting": 1, ...,
    "tenants": {"acme": ...}}}; usage of a pool the supervisor no longer has is left out."""
    kept = sorted(pools, key=lambda p: (_replicas(pools[p]) == 0, p))[:MAX_POOLS]
    return NodeReport(ts=ts, pools={name: _pool(pools[name], tenants.get(name, {})) for name in sorted(kept)})


def _pool(counts: ReplicaCounts, tenants: Mapping[str, TenantUsage]) -> PoolReport:
    busiest = sorted(
        tenants, key=lambda t: (-(tenants[t].requests_per_second or 0.0), -(tenants[t].kv_blocks or 0.0), t)
    )
    return PoolReport(
        ready=counts.ready,
        starting=counts.starting,
        draining=counts.draining,
        consecutive_crashes=counts.consecutive_crashes,
        startup_seconds=counts.startup_seconds,
        tenants={name: tenants[name] for name in sorted(busiest[:MAX_TENANTS_PER_POOL])},
    )


def _replicas(counts: ReplicaCounts) -> int:
    return counts.ready + counts.starting + counts.draining
