"""How hot a node is, for the overview's tiles: each metric judged ok / warn / critical, the tile takes the worst,
and a firing alert on the node (or on a pool it serves) is never outshone by a calm metric.

Thresholds are presentation, not policy (alert rules and the health report decide what is wrong): they only pick a
colour so an operator's eye lands on the node to open. GPU memory is judged as a share of each GPU's total
(57 GiB of 80 GiB is 71 %, ok); a pool's p99 against that pool's SLO when one is configured.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from alerting.lifecycle import Alert
from collector.registry import NodeStatus, NodeView
from wire.catalog import BY_NAME, PoolAggregate, Scope


class Heat(IntEnum):
    """Ordered so the worst is the max; UNKNOWN (nothing measured) sorts below OK."""

    UNKNOWN = 0
    OK = 1
    WARN = 2
    CRITICAL = 3

    @property
    def css(self) -> str:
        return self.name.lower()


# metric → (warn at or above, critical at or above)
THRESHOLDS: dict[str, tuple[float, float]] = {
    "gpu_utilization_ratio": (0.95, 0.99),
    "gpu_memory_bandwidth_utilization_ratio": (0.9, 0.98),
    "gpu_temperature_celsius": (80.0, 88.0),
    "network_latency_seconds": (0.25, 1.0),
    "queue_depth_requests": (8.0, 32.0),
    "kv_cache_utilization_ratio": (0.9, 0.97),
}
MEMORY_SHARE_THRESHOLDS = (0.9, 0.97)
SLO_SHARE_THRESHOLDS = (0.8, 1.0)  # p99 at 80 % of the SLO warns, at the SLO is critical


def judge(value: float | None, warn_at: float, critical_at: float) -> Heat:
    if value is None:
        return Heat.UNKNOWN
    if value >= critical_at:
        return Heat.CRITICAL
    if value >= warn_at:
        return Heat.WARN
    return Heat.OK


@dataclass(frozen=True)
class TileHeat:
    heat: Heat
    worst_metric: str | None  # the metric that set the colour; None when none is hot or nothing is measured


def node_heat(view: NodeView, slo_p99_seconds: Mapping[str, float]) -> TileHeat:
    """A down node is UNKNOWN whatever its last values said; otherwise the worst judged series of the node."""
    if view.status is NodeStatus.DOWN:
        return TileHeat(Heat.UNKNOWN, None)
    totals = {g.index: g.memory_total_bytes for g in view.gpus}
    found: list[tuple[Heat, str]] = []
    for s in view.series:
        for name, value in s.metrics.items():
            if name in THRESHOLDS:
                found.append((judge(value, *THRESHOLDS[name]), name))
        used, total = s.metrics.get("gpu_memory_used_bytes"), totals.get(s.device if s.device is not None else -1)
        if used is not None and total:
            found.append((judge(used / total, *MEMORY_SHARE_THRESHOLDS), "gpu_memory_used_bytes"))
        p99, slo = s.metrics.get("request_latency_p99_seconds"), slo_p99_seconds.get(s.pool or "")
        if p99 is not None and slo:
            found.append((judge(p99 / slo, *SLO_SHARE_THRESHOLDS), "request_latency_p99_seconds"))
    if not found:
        return TileHeat(Heat.UNKNOWN, None) if not view.series else TileHeat(Heat.OK, None)
    heat, name = max(found, key=lambda f: f[0])
    return TileHeat(heat, name if heat > Heat.OK else None)


# A firing alert's severity → the least heat its node's tile shows: an info alert still takes the green away.
SEVERITY_HEAT = {"critical": Heat.CRITICAL, "warning": Heat.WARN, "info": Heat.WARN}
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class AlertMark:
    """The firing alerts that concern one node: those naming it, and those of a pool it serves with no node named."""

    severity: str  # the worst of them
    names: tuple[str, ...]  # their alertnames, the worst first, each once

    @property
    def heat(self) -> Heat:
        return SEVERITY_HEAT.get(self.severity, Heat.WARN)

    @property
    def text(self) -> str:
        """ "2 firing: GpuHot, QueueDeep" """
        return f"{len(self.names)} firing: {', '.join(self.names)}"


def concerned_nodes(labels: Mapping[str, str], node_pools: Mapping[str, Collection[str]]) -> list[str]:
    """The nodes of ``node_pools`` (node → the pools it serves) that an alert with ``labels`` concerns: the node it
    names, else every node serving the pool it names."""
    if "node" in labels:
        return [labels["node"]] if labels["node"] in node_pools else []
    if "pool" in labels:
        return [n for n, pools in node_pools.items() if labels["pool"] in pools]
    return []


def alert_marks(firing: Sequence[Alert], node_pools: Mapping[str, Collection[str]]) -> dict[str, AlertMark]:
    """Each node of ``node_pools`` (node → the pools it serves) that a firing alert concerns, with its mark.

    Worked: ``GpuHot{node=a, severity=critical}`` and ``PoolSlow{pool=chat, severity=warning}``, with ``a`` and ``b``
    serving chat → ``a``: critical, GpuHot and PoolSlow; ``b``: warning, PoolSlow. An alert of another node's pool
    series (``node=c, pool=chat``) concerns ``c`` alone."""
    found: dict[str, list[tuple[int, str, str]]] = {}
    for alert in firing:
        labels = alert.labels
        severity = labels.get("severity", "")
        for node in concerned_nodes(labels, node_pools):
            found.setdefault(node, []).append(
                (SEVERITY_RANK.get(severity, len(SEVERITY_RANK)), severity, labels.get("alertname", "?"))
            )
    marks = {}
    for node, alerts in found.items():
        alerts.sort()
        marks[node] = AlertMark(alerts[0][1], tuple(dict.fromkeys(name for _, _, name in alerts)))
    return marks


def sparkline_points(values: Sequence[float], *, width: float = 60.0, height: float = 16.0) -> str:
    """An SVG polyline's ``points`` for ``values`` scaled into width × height (flat series drawn mid-height)."""
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low
    step = width / max(len(values) - 1, 1)
    ys = [height / 2 if span == 0 else height - (v - low) / span * height for v in values]
    return " ".join(f"{i * step:.1f},{y:.1f}" for i, y in enumerate(ys))


# What each metric is called where space is short (a tile, a chart title); every catalog metric has one. A tile's
# column is ~77 px: a name and its "max"/"sum" fit on one line ("Mem bandwidth" and "max" did not).
SHORT_NAMES: dict[str, str] = {
    "gpu_utilization_ratio": "GPU util",
    "gpu_memory_used_bytes": "GPU mem",
    "gpu_memory_bandwidth_utilization_ratio": "Mem BW",
    "gpu_power_watts": "Power",
    "gpu_temperature_celsius": "Temp",
    "network_throughput_bytes_per_second": "Network",
    "network_latency_seconds": "Push RTT",
    "request_rate_per_second": "Requests",
    "queue_depth_requests": "Queue",
    "token_throughput_per_second": "Tokens",
    "request_latency_p99_seconds": "p99 latency",
    "kv_cache_utilization_ratio": "KV cache",
}


# How a tile's value combines a node's series of one metric (the catalog's pool aggregate), said beside its name:
# "GPU util max" is the busiest GPU, "Power sum" every GPU's together. A node-scoped metric has one series: no word.
AGGREGATE_WORDS: dict[PoolAggregate, tuple[str, str]] = {
    PoolAggregate.MAX: ("max", "the highest of the node's"),
    PoolAggregate.SUM: ("sum", "summed over the node's"),
}
_SERIES_OF = {Scope.GPU: "GPUs", Scope.POOL_REPLICA: "replicas"}


def aggregate_label(name: str) -> tuple[str, str]:
    """(word, explanation) for catalog metric ``name``'s tile cell: ``("max", "the highest of the node's GPUs")``;
    ``("", "")`` for a node-scoped one."""
    entry = BY_NAME[name]
    if entry.scope not in _SERIES_OF:
        return "", ""
    word, how = AGGREGATE_WORDS[entry.pool_aggregate]
    return word, f"{how} {_SERIES_OF[entry.scope]}"
