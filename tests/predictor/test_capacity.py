"""Per-replica capacity from (rate, p99) moments: knee, the lower bound, too little evidence, outliers, bad data."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from predictor.capacity import (
    LearnedCapacity,
    NoCapacity,
    PoolCapacity,
    ReplicaCapacity,
    ReplicaObservation,
    learn_capacity,
    replica_capacity,
)

SLO = 1.0


def knee_replica(count: int, top_rate: float, knee: float = 40.0, seed: int = 7) -> list[ReplicaObservation]:
    """Rates uniform in (0, top_rate]; p99 about 0.3 s up to ``knee`` req/s and about 3 s past it."""
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.5, top_rate, count)
    latencies = np.where(rates <= knee, 0.3, 3.0) + rng.normal(0.0, 0.05, count)
    return [ReplicaObservation(float(r), float(lat)) for r, lat in zip(rates, latencies, strict=True)]


def test_sharp_knee_is_measured_near_it_and_never_above() -> None:
    learned = learn_capacity(knee_replica(400, 80.0), SLO)

    assert isinstance(learned, LearnedCapacity)
    assert learned.source == "measured"
    assert 36.0 <= learned.per_replica <= 40.0  # within one bin (80 / 20 = 4 req/s) below the knee
    assert learned.observations == 400
    assert learned.violations == sum(o.rate > 40.0 for o in knee_replica(400, 80.0))


def test_docstring_example_is_exact() -> None:
    rates = np.arange(1, 201) * 0.4
    moments = [ReplicaObservation(float(r), 0.3 if r <= 40.0 + 1e-9 else 3.0) for r in rates]

    learned = learn_capacity(moments, SLO)

    assert learned == LearnedCapacity(rates[99], "measured", 200, 100)  # rates[99] = 0.4 × 100, the top of bin 9
    lower = learn_capacity([m for m in moments if m.rate <= 30.0 + 1e-9], SLO)
    assert isinstance(lower, LearnedCapacity) and lower.source == "lower_bound"
    assert lower.per_replica == pytest.approx(28.52)


def test_never_broken_is_a_lower_bound_from_the_rates_seen() -> None:
    learned = learn_capacity(knee_replica(300, 30.0), SLO)

    assert isinstance(learned, LearnedCapacity)
    assert learned.source == "lower_bound"
    assert 25.0 <= learned.per_replica <= 30.0  # the 95th percentile of rates up to 30
    assert learned.violations == 0


@pytest.mark.parametrize(
    ("moments", "why"),
    [
        ([], "nothing"),
        (knee_replica(29, 80.0), "one short of 30"),
        ([ReplicaObservation(10.0, None)] * 100, "latency never measured"),
        ([ReplicaObservation(0.0, 0.2)] * 100, "idle: no demand served"),
        ([ReplicaObservation(10.0, 5.0)] * 100, "the SLO broke even at the lowest rates: nothing sustainable"),
    ],
)
def test_too_little_evidence_gives_none(moments: list[ReplicaObservation], why: str) -> None:
    assert isinstance(learn_capacity(moments, SLO), NoCapacity), why


def test_min_observations_is_the_threshold() -> None:
    moments = knee_replica(10, 30.0)

    missing = learn_capacity(moments, SLO)
    assert isinstance(missing, NoCapacity) and "30 needed" in missing.reason
    assert isinstance(learn_capacity(moments, SLO, min_observations=10), LearnedCapacity)


def test_unusable_moments_are_not_counted() -> None:
    moments = [*knee_replica(100, 80.0), ReplicaObservation(0.0, 0.3), ReplicaObservation(20.0, None)]

    learned = learn_capacity(moments, SLO)

    assert isinstance(learned, LearnedCapacity) and learned.observations == 100


def test_one_slow_request_at_low_load_does_not_collapse_it() -> None:
    clean = knee_replica(400, 80.0)
    with_outlier = [ReplicaObservation(1.0, 8.0), *clean]

    learned, reference = learn_capacity(with_outlier, SLO), learn_capacity(clean, SLO)

    assert isinstance(learned, LearnedCapacity) and isinstance(reference, LearnedCapacity)
    assert learned.source == "measured"
    assert learned.per_replica == pytest.approx(reference.per_replica, abs=1.0)  # bins shift by one moment at most


def test_one_slow_moment_in_the_smallest_bin_does_not_break_it() -> None:
    # 30 moments → 3 bins of 10; one slow one is 10 % of its bin, not more: never broken, a lower bound at ~29
    moments = [ReplicaObservation(float(r), 0.3) for r in range(1, 31)]
    moments[0] = ReplicaObservation(1.0, 5.0)

    learned = learn_capacity(moments, SLO)

    assert isinstance(learned, LearnedCapacity)
    assert learned.source == "lower_bound"
    assert learned.per_replica > 25.0
    assert learned.violations == 1


def test_latency_at_the_slo_is_within_it() -> None:
    learned = learn_capacity([ReplicaObservation(float(r), SLO) for r in range(1, 41)], SLO)

    assert isinstance(learned, LearnedCapacity) and learned.violations == 0


@pytest.mark.parametrize("slo", [0.0, -1.0, math.nan, math.inf])
def test_bad_slo_names_the_field(slo: float) -> None:
    with pytest.raises(ValueError, match="slo_p99_seconds"):
        learn_capacity(knee_replica(50, 80.0), slo)


def test_bad_min_observations_names_the_field() -> None:
    with pytest.raises(ValueError, match="min_observations"):
        learn_capacity(knee_replica(50, 80.0), SLO, min_observations=0)


@pytest.mark.parametrize(
    ("rate", "latency", "field"),
    [
        (math.nan, 0.2, "rate"),
        (-1.0, 0.2, "rate"),
        (math.inf, 0.2, "rate"),
        (10.0, math.nan, "latency_p99"),
        (10.0, -0.1, "latency_p99"),
    ],
)
def test_bad_observation_names_the_field(rate: float, latency: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ReplicaObservation(rate, latency)


LEARNED = ReplicaCapacity(38.5, "measured")


@pytest.mark.parametrize(
    ("configured", "learned", "expected"),
    [
        (40.0, LEARNED, ReplicaCapacity(40.0, "configured")),  # configured wins, and learning is not even asked
        (None, LEARNED, LEARNED),
        (None, ReplicaCapacity(20.0, "lower_bound"), ReplicaCapacity(20.0, "lower_bound")),
        (None, None, None),  # neither: nothing to size by
    ],
)
def test_configured_capacity_else_the_learned_one(
    configured: float | None, learned: ReplicaCapacity | None, expected: ReplicaCapacity | None
) -> None:
    asked: list[bool] = []

    def learn() -> ReplicaCapacity | None:
        asked.append(True)
        return learned

    assert replica_capacity(configured, learn) == expected
    assert asked == ([] if configured is not None else [True])


@pytest.mark.parametrize(
    ("pool", "stored"),
    [
        (
            PoolCapacity(2, LEARNED),
            {"replicas": 2, "per_replica_capacity": 38.5, "capacity_source": "measured", "capacity_missing": None},
        ),
        (
            PoolCapacity(0, None, "only 3 moments"),
            {
                "replicas": 0,
                "per_replica_capacity": None,
                "capacity_source": None,
                "capacity_missing": "only 3 moments",
            },
        ),
    ],
)
def test_pool_capacity_is_stored_under_its_keys_and_read_back(pool: PoolCapacity, stored: dict[str, Any]) -> None:
    assert pool.as_json() == stored and list(pool.as_json()) == list(stored)
    assert PoolCapacity.from_json({"probability": None, **stored}) == pool


def test_a_device_saturation_has_no_pool_capacity_and_a_pool_without_replicas_none_in_all() -> None:
    assert PoolCapacity.from_json({"memory_total_bytes": 8e10, "exhaustion_ratio": 0.95}) is None
    assert PoolCapacity(0, LEARNED).total is None and PoolCapacity(2, None).total is None
    assert PoolCapacity(2, LEARNED).total == 77.0
