"""Nodes as ingest stores them: the node row (its last push now), its GPUs and its latest report, through
:func:`collector.node_reports.store_report` — what the fleet view and the local actuator read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Engine, delete, insert, update

from collector.node_reports import store_report
from collector.tables import NO_POOL, devices, nodes, series_latest
from tests.support.clock import FakeClock
from wire.control import DesiredRefusal, EngineOffer, NodeCapabilities, NodeReport, PoolReport

MIB = 1 << 20
BUILTIN = {"text": EngineOffer(), "classify": EngineOffer(serves="classify")}


def offers(
    profiles: Mapping[str, Sequence[str]] | None = None, labels: Mapping[str, str] | None = None
) -> NodeCapabilities:
    """The built-in engines, the profiles (name → models) and labels a node declares."""
    engines = {**BUILTIN, **{name: EngineOffer(models=list(models)) for name, models in (profiles or {}).items()}}
    return NodeCapabilities(engines=engines, labels=dict(labels or {}))


def push(
    engine: Engine,
    clock: FakeClock,
    node: str,
    pools: Mapping[str, int] | None = None,
    *,
    capabilities: NodeCapabilities | None = None,
    gpus_mib: Sequence[int] = (),
    refused: DesiredRefusal | None = None,
    starting: Mapping[str, int] | None = None,
    gpu_utilization: float | None = None,
) -> None:
    """``node`` pushes now: ready replicas per pool (and ``starting`` ones), what it offers, its GPUs by memory, and
    its GPU 0's utilization (what routing weights need to rank a node)."""
    names = set(pools or {}) | set(starting or {})
    report = NodeReport(
        ts=clock(),
        pools={
            p: PoolReport(ready=(pools or {}).get(p, 0), starting=(starting or {}).get(p, 0)) for p in sorted(names)
        },
        capabilities=capabilities,
        refused=refused,
    )
    with engine.begin() as conn:
        done = conn.execute(update(nodes).where(nodes.c.id == node).values(last_seen=clock()))
        if done.rowcount == 0:
            conn.execute(insert(nodes).values(id=node, first_seen=clock(), last_seen=clock()))
        conn.execute(delete(devices).where(devices.c.node_id == node))
        if gpus_mib:
            conn.execute(
                insert(devices),
                [
                    {"node_id": node, "index": i, "memory_total_bytes": m * MIB, "updated_at": clock()}
                    for i, m in enumerate(gpus_mib)
                ],
            )
        store_report(conn, node, report, received_at=clock())
        if gpu_utilization is not None:
            conn.execute(delete(series_latest).where(series_latest.c.node_id == node, series_latest.c.device == 0))
            conn.execute(
                insert(series_latest).values(
                    node_id=node, device=0, pool=NO_POOL, ts=clock(), gpu_utilization_ratio=gpu_utilization
                )
            )
