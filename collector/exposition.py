"""Prometheus exposition of the fleet: each load metric's latest value per series, read at scrape time.

Names come from the catalog (``fleetpilot_<metric name>``, labels ``node``, ``gpu``, ``pool``); a series without a
GPU or a pool carries an empty label, which Prometheus treats as absent. Series of nodes that are down are left out,
so a dead node's last reading never passes for a current one; ``fleetpilot_node_up`` says which nodes are down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.registry import LatestSeries, NodeStatus
from wire.catalog import METRICS

SERIES_LABELS = ("node", "gpu", "pool")


@dataclass(frozen=True)
class FleetSnapshot:
    series: Sequence[LatestSeries]
    node_status: dict[str, NodeStatus]


def exposition_name(metric_name: str) -> str:
    return f"fleetpilot_{metric_name}"


class FleetCollector(Collector):
    """A prometheus_client collector over ``read_snapshot()``, called once per scrape."""

    def __init__(self, read_snapshot: Callable[[], FleetSnapshot]) -> None:
        self._read_snapshot = read_snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self._read_snapshot()
        families = {
            m.name: GaugeMetricFamily(exposition_name(m.name), f"{m.help} Unit: {m.unit}.", labels=SERIES_LABELS)
            for m in METRICS
        }
        for s in snapshot.series:
            if snapshot.node_status.get(s.node_id) is not NodeStatus.UP:
                continue  # a down node's last values are not current: absent, not stale
            labels = [s.node_id, "" if s.device is None else str(s.device), s.pool or ""]
            for name, value in s.metrics.items():
                families[name].add_metric(labels, value)
        yield from families.values()
        up = GaugeMetricFamily(
            "fleetpilot_node_up", "1 while the node's last samples arrived within the liveness window.", labels=["node"]
        )
        for node_id, status in sorted(snapshot.node_status.items()):
            up.add_metric([node_id], 1.0 if status is NodeStatus.UP else 0.0)
        yield up

    def describe(self) -> Iterator[Metric]:
        # Registering must not scrape the database; the families are the same on every scrape.
        return iter(())
