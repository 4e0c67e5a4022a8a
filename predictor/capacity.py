"""Per-replica capacity learned from the metrics: the demand one replica sustains within the pool's latency SLO.

Each observation pairs the demand served per ready replica with the pool's p99 latency at that moment. Sorted by
rate and cut into bins of equal count, they show where latency breaks: a bin breaks the SLO when more than 10 % of
its latencies exceed it (its p90 is over). The capacity is the top rate of the last bin below the first broken one
("measured": a true knee). When no bin breaks, the replica was never pushed to its knee, and the 95th percentile of
the rates seen within the SLO is only a lower bound ("lower_bound"). Too little evidence gives :class:`NoCapacity`
saying why, never a made-up number.

What a pool is sized by is one rule (:func:`replica_capacity`): the configured ``replica_capacity``, else the learned
one, else nothing. The forecast loop stores it with each pool forecast (:class:`PoolCapacity`, inside the forecast's
``saturation``); the autoscaler, the capacity plan and the dashboard read it back from there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

import numpy as np

MIN_PER_BIN = 10  # one slow request is 1/10 of the smallest bin: not over BREAK_SHARE, so it never breaks one alone
MAX_BINS = 20  # rate resolution: 2,000 observations → 20 bins of 100, each a twentieth of the rates seen
BREAK_SHARE = 0.10  # a bin breaks the SLO when more than this share of its latencies exceed it
LOWER_BOUND_QUANTILE = 0.95  # never broken: the 95th percentile of in-SLO rates, so one rate spike does not count

CapacitySource = Literal["measured", "lower_bound"]  # learned from the metrics
ReplicaCapacitySource = Literal["configured", CapacitySource]
LEARNED_SOURCES: frozenset[str] = frozenset(get_args(CapacitySource))


@dataclass(frozen=True)
class ReplicaObservation:
    """One moment of a pool: demand per ready replica (pool rate / replicas_ready) and its p99 latency in seconds.

    ``latency_p99`` is ``None`` when latency was not measured then; such moments carry no evidence.
    """

    rate: float
    latency_p99: float | None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate >= 0):
            raise ValueError(f"rate must be a finite number >= 0, got {self.rate}")
        if self.latency_p99 is not None and not (math.isfinite(self.latency_p99) and self.latency_p99 >= 0):
            raise ValueError(f"latency_p99 must be a finite number >= 0 or None, got {self.latency_p99}")


@dataclass(frozen=True)
class LearnedCapacity:
    """Demand units per second one replica sustains within the SLO, and how sure that is.

    ``source`` is "measured" (the SLO was seen to break above it) or "lower_bound" (never broke: at least this);
    ``observations`` counts the moments used (rate > 0 with a latency), ``violations`` those over the SLO.
    """

    per_replica: float
    source: CapacitySource
    observations: int
    violations: int


def learn_capacity(
    observations: Sequence[ReplicaObservation], slo_p99_seconds: float, *, min_observations: int = 30
) -> LearnedCapacity | NoCapacity:
    """The rate one replica sustains within ``slo_p99_seconds``; :class:`NoCapacity` without enough evidence.

    Too little evidence is fewer than ``min_observations`` moments with rate > 0 and a latency, or an SLO broken
    already in the lowest-rate bin (no rate was seen to be sustainable).
    200 moments at 0.4..80 req/s, p99 0.3 s up to 40 req/s and 3 s above, SLO 1 s → 20 bins of 10 (4 req/s wide);
    the bin from 40.4 req/s is the first broken → ``LearnedCapacity(40.0, "measured", 200, 100)``.
    The same replica seen only up to 30 req/s → about 28.5 (the 95th percentile of its rates), "lower_bound".
    """
    if not (math.isfinite(slo_p99_seconds) and slo_p99_seconds > 0):
        raise ValueError(f"slo_p99_seconds must be a finite number > 0, got {slo_p99_seconds}")
    if min_observations < 1:
        raise ValueError(f"min_observations must be at least 1, got {min_observations}")
    usable = [(o.rate, o.latency_p99) for o in observations if o.rate > 0 and o.latency_p99 is not None]
    if len(usable) < min_observations:
        return NoCapacity(
            f"only {len(usable)} moments of the pool's replicas serving requests with a p99 latency measured, "
            f"{min_observations} needed: let it serve traffic a while, or set replica_capacity"
        )
    pairs = np.array(usable, dtype=np.float64)
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    rates, over = pairs[:, 0], pairs[:, 1] > slo_p99_seconds
    violations = int(over.sum())
    bins = np.array_split(np.arange(len(rates)), max(1, min(MAX_BINS, len(rates) // MIN_PER_BIN)))
    broken = [i for i, members in enumerate(bins) if over[members].mean() > BREAK_SHARE]
    if not broken:
        # every bin holds at least 90 % in-SLO moments, so the quantile has data
        lower_bound = float(np.quantile(rates[~over], LOWER_BOUND_QUANTILE))
        return LearnedCapacity(lower_bound, "lower_bound", len(rates), violations)
    if broken[0] == 0:
        return NoCapacity(
            f"its p99 latency was over the {slo_p99_seconds:g} s SLO already at the lowest rates seen: no rate was "
            "sustainable within it; raise slo.latency_p99_seconds or set replica_capacity"
        )
    knee = float(rates[bins[broken[0] - 1][-1]])
    return LearnedCapacity(knee, "measured", len(rates), violations)


@dataclass(frozen=True)
class NoCapacity:
    """Why no capacity could be learned, in words an operator can act on."""

    reason: str


@dataclass(frozen=True)
class ReplicaCapacity:
    """What one replica of a pool sustains, in demand units per second, and where that figure came from: the pool's
    ``replica_capacity`` ("configured") or the metrics (a :class:`LearnedCapacity`'s source)."""

    per_replica: float
    source: ReplicaCapacitySource

    @property
    def learned(self) -> bool:
        return self.source in LEARNED_SOURCES


def replica_capacity(configured: float | None, learned: Callable[[], ReplicaCapacity | None]) -> ReplicaCapacity | None:
    """The configured per-replica capacity, else the learned one, else None: nothing to size by.

    ``learned`` is called only when none is configured (the forecast loop learns from the raw samples then).
    A configured capacity is never 0: the pool's spec refuses anything but a finite number > 0.
    """
    if configured is not None:
        return ReplicaCapacity(configured, "configured")
    return learned()


@dataclass(frozen=True)
class PoolCapacity:
    """What a pool's demand forecast is measured against: its ready replicas times what one replica sustains
    (``per_replica`` None: neither configured nor learned yet). Stored and answered inside the forecast's
    ``saturation`` as ``replicas``, ``per_replica_capacity`` and ``capacity_source``."""

    replicas: int
    per_replica: ReplicaCapacity | None
    missing: str | None = None  # why per_replica is None (NoCapacity's reason)

    @property
    def total(self) -> float | None:
        """Ready replicas × per-replica capacity; None without a ready replica or a per-replica figure."""
        if self.per_replica is None or self.replicas <= 0:
            return None
        return self.replicas * self.per_replica.per_replica

    def as_json(self) -> dict[str, Any]:
        per = self.per_replica
        return {
            "replicas": self.replicas,
            "per_replica_capacity": None if per is None else per.per_replica,
            "capacity_source": None if per is None else per.source,
            "capacity_missing": self.missing if per is None else None,
        }

    @classmethod
    def from_json(cls, saturation: Mapping[str, Any]) -> PoolCapacity | None:
        """The pool part of a stored ``saturation``; None when it has none (a device's or a KV cache's)."""
        replicas = saturation.get("replicas")
        if not isinstance(replicas, int):
            return None
        value, source = saturation.get("per_replica_capacity"), saturation.get("capacity_source")
        if not isinstance(value, int | float) or source not in get_args(ReplicaCapacitySource):
            missing = saturation.get("capacity_missing")
            return cls(replicas, None, missing if isinstance(missing, str) else None)
        return cls(replicas, ReplicaCapacity(float(value), cast(ReplicaCapacitySource, source)))
