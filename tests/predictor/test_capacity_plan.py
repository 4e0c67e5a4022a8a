"""Capacity plans: the rule of thumb, measured capacity, growth given or estimated, peaks, gaps, costs, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.base import History
from predictor.capacity_plan import CapacityPlan, PlanHorizon, PlanInputs, plan_capacity

MINUTE = 60.0
TEN_MINUTES = 600.0
DAY = 86_400.0
FLAT = PlanInputs(per_replica_capacity=None, growth_per_month=0.0, headroom=0.0)


def flat(value: float, days: float = 1.0, step: float = MINUTE) -> History:
    return History(np.full(round(days * DAY / step), value), step, start_ts=1_700_000_000.0)


def growing(days: int, monthly: float = 0.10, seed: int = 3) -> History:
    """10-minute steps: a daily cycle between 100 and 300 req/s with 2 % noise, growing ``monthly`` per 30 days."""
    rng = np.random.default_rng(seed)
    t = np.arange(days * 144) * TEN_MINUTES
    daily = 200.0 + 100.0 * np.sin(2 * math.pi * t / DAY)
    values = daily * (1 + monthly) ** (t / (30 * DAY)) * rng.normal(1.0, 0.02, len(t))
    return History(values, TEN_MINUTES, start_ts=1_700_000_000.0)


def horizon(plan: CapacityPlan, name: str) -> PlanHorizon:
    return next(h for h in plan.horizons if h.name == name)


def test_rule_of_thumb_1000_qps_is_8_gpus_on_one_node() -> None:
    plan = plan_capacity(flat(1_000.0), FLAT)

    assert plan.capacity_source == "rule_of_thumb"
    assert plan.per_replica_capacity == 125.0
    assert plan.current_peak == pytest.approx(1_000.0)
    assert [h.name for h in plan.horizons] == ["next_week", "next_month"]
    assert [h.days for h in plan.horizons] == [7.0, 30.0]
    for h in plan.horizons:
        assert (h.replicas, h.gpus, h.nodes, h.cost) == (8, 8, 1, None)


def test_rule_of_thumb_scales_with_gpus_per_replica() -> None:
    plan = plan_capacity(flat(1_000.0), PlanInputs(None, gpus_per_replica=2, growth_per_month=0.0, headroom=0.0))

    assert plan.per_replica_capacity == 250.0
    assert (plan.horizons[0].replicas, plan.horizons[0].gpus, plan.horizons[0].nodes) == (4, 8, 1)


def test_docstring_worked_example_with_measured_capacity_growth_and_cost() -> None:
    inputs = PlanInputs(40.0, gpus_per_replica=2, gpu_hour_cost=2.0, growth_per_month=0.1, headroom=0.2)

    plan = plan_capacity(flat(100.0), inputs)

    assert (plan.capacity_source, plan.per_replica_capacity) == ("measured", 40.0)
    assert (plan.growth_source, plan.growth_per_month) == ("given", 0.1)
    month = horizon(plan, "next_month")
    assert month.peak_demand == pytest.approx(110.0)
    assert (month.replicas, month.gpus, month.nodes) == (4, 8, 1)  # 110 × 1.2 / 40 = 3.3 → 4
    assert month.cost == pytest.approx(8 * 2.0 * 30 * 24)
    week = horizon(plan, "next_week")
    assert week.peak_demand == pytest.approx(100.0 * 1.1 ** (7 / 30))
    assert week.cost == pytest.approx(week.gpus * 2.0 * 7 * 24)


def test_nodes_are_whole_and_headroom_adds_replicas() -> None:
    plan = plan_capacity(flat(1_000.0), PlanInputs(None, growth_per_month=0.0, headroom=0.2))

    assert (plan.horizons[0].replicas, plan.horizons[0].nodes) == (10, 2)  # 1,200 / 125 = 9.6 → 10 GPUs → 2 nodes


def test_exact_fit_does_not_round_up_on_float_noise() -> None:
    plan = plan_capacity(flat(100.0), PlanInputs(110.0, growth_per_month=0.1, headroom=0.0))

    assert horizon(plan, "next_month").replicas == 1  # 100 × 1.1 = 110.00000000000001 fits one replica of 110


@pytest.mark.parametrize(("demand", "replicas"), [(0.0, 0), (0.01, 1)])
def test_any_demand_needs_a_replica_and_none_needs_none(demand: float, replicas: int) -> None:
    plan = plan_capacity(flat(demand), FLAT)

    assert all((h.replicas, h.gpus, h.nodes) == (replicas, replicas, replicas) for h in plan.horizons)


def test_one_spike_does_not_buy_gpus() -> None:
    history = flat(100.0)
    history.values[700] = 10_000.0

    assert plan_capacity(history, FLAT).current_peak == pytest.approx(100.0)


def test_current_peak_is_the_last_day() -> None:
    history = History(np.concatenate([np.full(1_440, 500.0), np.full(1_440, 100.0)]), MINUTE)

    assert plan_capacity(history, FLAT).current_peak == pytest.approx(100.0)


def test_growth_of_10_percent_a_month_is_estimated_from_10_days() -> None:
    plan = plan_capacity(growing(10), PlanInputs(None))

    assert plan.growth_source == "estimated"
    assert plan.growth_per_month == pytest.approx(0.10, abs=0.02)
    assert horizon(plan, "next_month").peak_demand == pytest.approx(plan.current_peak * (1 + plan.growth_per_month))


def test_shrinking_demand_is_estimated_too() -> None:
    plan = plan_capacity(growing(10, monthly=-0.2), PlanInputs(None))

    assert plan.growth_per_month == pytest.approx(-0.2, abs=0.02)


def test_under_three_full_days_assumes_no_growth() -> None:
    history = growing(3)
    plan = plan_capacity(History(history.values[100:], TEN_MINUTES), PlanInputs(None))

    assert (plan.growth_source, plan.growth_per_month) == ("none", 0.0)


def test_given_growth_wins_over_the_history() -> None:
    plan = plan_capacity(growing(10), PlanInputs(None, growth_per_month=0.5))

    assert (plan.growth_source, plan.growth_per_month) == ("given", 0.5)


def test_gaps_are_ignored_not_read_as_zero() -> None:
    full = growing(10)
    gappy = full.values.copy()
    rng = np.random.default_rng(5)
    gappy[rng.random(len(gappy)) < 0.2] = np.nan  # a fifth of the steps missing
    gappy[144 * 4 : 144 * 4 + 120] = np.nan  # most of a day missing: that day is left out of the growth fit
    gappy = np.concatenate([gappy, np.full(72, np.nan)])  # an agent away for the last half day

    plan = plan_capacity(History(gappy, TEN_MINUTES), PlanInputs(None))
    reference = plan_capacity(full, PlanInputs(None))

    assert plan.growth_source == "estimated"
    assert plan.growth_per_month == pytest.approx(0.10, abs=0.03)
    assert plan.current_peak == pytest.approx(reference.current_peak, rel=0.05)


def test_a_history_with_no_observed_value_is_refused() -> None:
    with pytest.raises(ValueError, match="no observed values"):
        plan_capacity(History(np.full(10, np.nan), MINUTE), FLAT)


def test_negative_demand_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        plan_capacity(History(np.array([1.0, -1.0]), MINUTE), FLAT)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"per_replica_capacity": 0.0}, "per_replica_capacity"),
        ({"per_replica_capacity": -5.0}, "per_replica_capacity"),
        ({"per_replica_capacity": math.nan}, "per_replica_capacity"),
        ({"gpus_per_replica": 0}, "gpus_per_replica"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"gpu_hour_cost": -0.5}, "gpu_hour_cost"),
        ({"gpu_hour_cost": math.inf}, "gpu_hour_cost"),
        ({"growth_per_month": -1.0}, "growth_per_month"),
        ({"growth_per_month": math.nan}, "growth_per_month"),
        ({"headroom": -0.1}, "headroom"),
    ],
)
def test_bad_inputs_name_the_field(changes: dict[str, float], field: str) -> None:
    arguments: dict[str, float | None] = {"per_replica_capacity": 10.0, **changes}
    with pytest.raises(ValueError, match=field):
        PlanInputs(**arguments)  # type: ignore[arg-type]
