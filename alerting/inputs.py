"""What one evaluation reads, gathered from storage by the job (:mod:`alerting.gather`) and judged purely.

Everything is plain frozen data: a test builds an :class:`Inputs` by hand, with times as plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from collector.registry import SCRAPES_BEFORE_DOWN


@dataclass(frozen=True)
class Reading:
    """One series' values at ``ts``: the latest sample, or a statistic over a rule's window (``ts`` its end)."""

    node: str
    device: int | None
    pool: str | None
    ts: float
    values: Mapping[str, float]
    resolution_seconds: float | None = None  # between samples of a scraped series (remote write); None: an agent's

    def fresh(self, now: float, fresh_seconds: float) -> bool:
        """Judged while under ``fresh_seconds`` old, or under the scrape intervals a scraped node stays up for."""
        return now - self.ts <= max(fresh_seconds, SCRAPES_BEFORE_DOWN * (self.resolution_seconds or 0.0))

    def labels(self) -> dict[str, str]:
        labels = {"node": self.node}
        if self.device is not None:
            labels["gpu"] = str(self.device)
        if self.pool is not None:
            labels["pool"] = self.pool
        return labels


@dataclass(frozen=True)
class ForecastView:
    """A stored forecast's saturation figures; ``error`` set when its last attempt failed (stale), ``warming_up``
    when it failed only for too little history and was never forecast yet (:func:`predictor.store.warming_up`)."""

    kind: str  # pool | device | replicas
    subject: str  # "chat", "node-a/0", "node-a/chat"
    metric: str
    probability: float | None
    eta_seconds: float | None
    horizon_seconds: float | None
    error: str | None = None
    warming_up: bool = False


@dataclass(frozen=True)
class PoolScaling:
    """A pool's desired replicas (None: not decided yet), its ready ones, its last failed actuation, and whether the
    desired count is applied (``fleet.pools.applies_desired``: not in dry run, no other autoscaler owning it)."""

    pool: str
    desired: int | None
    ready: int
    last_failed_ts: float | None = None
    last_failure: str | None = None
    applied: bool = True


@dataclass(frozen=True)
class Throttle:
    """A tenant throttled on a node's pool for breaking its share (an enforcement event)."""

    tenant: str
    node: str
    pool: str
    ts: float
    message: str = ""


@dataclass(frozen=True)
class Inputs:
    readings: Sequence[Reading] = ()  # the latest reading of every series
    node_last_seen: Mapping[str, float] = field(default_factory=dict)  # server clock of each node's last samples
    up_nodes: frozenset[str] = frozenset()  # the nodes up by the fleet's one threshold (fleet.view.FleetReader)
    windowed: Mapping[int, Sequence[Reading]] = field(default_factory=dict)  # by rule id: window stat or change
    forecasts: Sequence[ForecastView] = ()
    pools: Sequence[PoolScaling] = ()
    throttles: Sequence[Throttle] = ()
    slo_p99_seconds: Mapping[str, float] = field(default_factory=dict)  # each pool's latency SLO (slo_ratio rules)
    fresh_seconds: float = 3.0  # a reading older than this is not judged: its alert keeps its state

    def nodes_of_pool(self) -> dict[str, set[str]]:
        """Which nodes run each pool: those with a reading under that pool (the GPUs and NICs a pool uses)."""
        found: dict[str, set[str]] = {}
        for r in self.readings:
            if r.pool is not None:
                found.setdefault(r.pool, set()).add(r.node)
        return found
