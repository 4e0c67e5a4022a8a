"""The scaling policies and their safety rails, decision by decision."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from autoscaler.policy.band_scale import INITIAL_BAND_SCALE, adapted_band_scale
from autoscaler.policy.decision import ForecastView, PoolContext, ScalingPolicy
from autoscaler.policy.hybrid import Hybrid
from autoscaler.policy.predictive import Predictive
from autoscaler.policy.rails import guarded
from autoscaler.policy.reactive import Reactive
from autoscaler.policy.registry import POLICIES, make_policy
from autoscaler.policy.settings import PolicySettings
from autoscaler.policy.static import Static
from autoscaler.scaling_events import ReasonCode, reason_family
from fleet.pools import Policy

NOW = 10_000.0
# The worked numbers below size on the forecast band's own upper bound at 0.9 per replica; the adapted bound (the
# defaults) has tests of its own.
FIXED_BAND = PolicySettings(attainment_target=None, predictive_utilization=0.9)


def ctx(**changes: object) -> PoolContext:
    """10 ready replicas of capacity 10/s, demand 70/s (exactly the 0.7 target), fresh; startup 120 s."""
    base = PoolContext(
        now=NOW,
        min_replicas=1,
        max_replicas=100,
        ready_replicas=10,
        starting_replicas=0,
        per_replica_capacity=10.0,
        demand=70.0,
        demand_age_seconds=1.0,
        startup_seconds=120.0,
        settings=FIXED_BAND,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


WORSE = "its forecasts scored worse than naive over the last 24h (MASE 1.30)"


def forecast(upper: float, *, stale: bool = False, distrusted: str | None = None) -> ForecastView:
    """Points every 60 s for 15 minutes with ``hi`` = upper (yhat a little below)."""
    points = tuple((NOW + 60 * k, upper * 0.8, upper * 0.6, upper) for k in range(1, 16))
    return ForecastView(NOW, points, stale=stale, error="diverged" if stale else None, distrusted=distrusted)


def test_reactive_follows_hpa_utilization_math() -> None:
    assert Reactive().decide(ctx(demand=140.0)).replicas == 20  # twice the target load → twice the replicas
    assert Reactive().decide(ctx(demand=75.0)).replicas == 10  # 75/70 is within the 10 % tolerance
    assert Reactive().decide(ctx(demand=35.0)).replicas == 5


def test_reactive_holds_without_capacity_or_demand() -> None:
    assert Reactive().decide(ctx(per_replica_capacity=None, demand=500.0)).replicas == 10
    held = Reactive().decide(ctx(demand=None))
    assert held.replicas == 10 and "no demand" in held.reason


def test_predictive_provisions_for_the_upper_bound_after_startup() -> None:
    decision = Predictive().decide(ctx(forecast=forecast(180.0)))
    assert decision.replicas == 20  # ceil(180 / (0.9 × 10))
    assert decision.inputs["forecast_upper"] == 180.0


def test_predictive_looks_only_at_the_window_a_new_replica_will_serve() -> None:
    points = tuple((NOW + 60 * k, 10.0, 5.0, 500.0 if k == 1 else 45.0) for k in range(1, 16))
    decision = Predictive().decide(ctx(forecast=ForecastView(NOW, points)))
    assert decision.replicas == 5  # the spike at +60 s is over before a replica asked now is ready (+120 s)


@pytest.mark.parametrize(("margin", "replicas"), [(60.0, 5), (61.0, 56)])
def test_the_window_ends_before_the_next_decisions_point(margin: float, replicas: int) -> None:
    # startup 120 s, margin 60 s: [+120, +180) is this decision's; the spike at +180 is the next decision's to cover.
    points = tuple((NOW + 60 * k, 10.0, 5.0, 500.0 if k == 3 else 45.0) for k in range(1, 16))
    settings = replace(FIXED_BAND, margin_seconds=margin)
    assert Predictive().decide(ctx(forecast=ForecastView(NOW, points), settings=settings)).replicas == replicas


@pytest.mark.parametrize(
    ("upper", "replicas"),
    [(80.0, 10), (70.0, 8), (200.0, 23)],  # 9 of 10 is within the 10 % tolerance; 8 is not; scale-ups are not damped
)
def test_predictive_scales_down_only_past_the_tolerance(upper: float, replicas: int) -> None:
    decision = Predictive().decide(ctx(forecast=forecast(upper)))
    assert decision.replicas == replicas
    assert ("tolerance" in decision.reason) == (replicas == 10)


def test_predictive_switches_off_and_says_so_on_a_stale_forecast() -> None:
    decision = Predictive().decide(ctx(demand=140.0, forecast=forecast(1000.0, stale=True)))
    assert decision.replicas == 20  # the reactive answer, not the stale forecast's 112
    assert "predictive off (forecast stale: diverged)" in decision.reason
    assert decision.inputs["predictive"] == "off"
    assert "no forecast" in Predictive().decide(ctx()).reason


def test_hybrid_is_the_larger_with_reactive_as_the_floor() -> None:
    assert Hybrid().decide(ctx(demand=140.0, forecast=forecast(90.0))).replicas == 20  # forecast under-shoots
    high = Hybrid().decide(ctx(demand=70.0, forecast=forecast(270.0)))
    assert high.replicas == 30 and high.inputs["reactive_replicas"] == 10 and high.inputs["predictive_replicas"] == 30


def test_a_forecast_below_reactive_leads_the_scale_down_but_never_below_todays_demand() -> None:
    # 20 replicas, demand 126 (0.63 of capacity: reactive holds within its tolerance), upper bound 150 → 17
    held = ctx(ready_replicas=20, demand=126.0, forecast=forecast(150.0))
    assert Reactive().decide(held).replicas == 20
    led = Hybrid().decide(held)
    assert led.replicas == 17 and "the forecast leads the scale-down" in led.reason
    # an upper bound under today's demand: the floor is today's demand at 90 % per replica, ceil(126 / 9)
    assert Hybrid().decide(ctx(ready_replicas=20, demand=126.0, forecast=forecast(40.0))).replicas == 14
    # reactive scaling up: it is the floor, whatever the forecast says
    assert Hybrid().decide(ctx(demand=140.0, forecast=forecast(40.0))).replicas == 20
    # no usable forecast: reactive alone
    assert Hybrid().decide(ctx(ready_replicas=20, demand=126.0, forecast=forecast(150.0, stale=True))).replicas == 20


def test_no_scale_down_on_stale_metrics() -> None:
    decision = guarded(Reactive(), ctx(demand=20.0, demand_age_seconds=120.0))
    assert decision.replicas == 10 and "stale or missing" in decision.reason


def test_scale_down_waits_for_the_stabilization_window() -> None:
    recent = ((10, 60.0), (9, 120.0))  # a recommendation of 10 a minute ago is still in the 300 s window
    held = guarded(Reactive(), ctx(demand=35.0, recent_recommendations=recent))
    assert held.replicas == 10 and "stabilization window" in held.reason
    later = guarded(Reactive(), ctx(demand=35.0, recent_recommendations=((10, 400.0),)))
    assert later.replicas == 5


def test_a_startup_longer_than_the_window_stretches_it() -> None:
    recent = ((10, 400.0),)  # out of HPA's 300 s window, but within a 600 s startup
    held = guarded(Reactive(), ctx(demand=35.0, startup_seconds=600.0, recent_recommendations=recent))
    assert held.replicas == 10 and "stabilization window (600 s)" in held.reason
    assert (
        guarded(Reactive(), ctx(demand=35.0, startup_seconds=600.0, recent_recommendations=((10, 700.0),))).replicas
        == 5
    )


def test_scale_down_keeps_the_load_per_surviving_replica_within_target() -> None:
    # The forecast says 30/s is coming, but 70/s is here: predictive would keep 4, the check keeps 70 / 9 → 8.
    decision = guarded(Predictive(), ctx(demand=70.0, forecast=forecast(30.0)))
    assert decision.replicas == 8 and "load per surviving replica" in decision.reason


def test_replicas_still_starting_are_not_cancelled_while_needed() -> None:
    decision = guarded(Reactive(), ctx(ready_replicas=10, starting_replicas=6, demand=84.0))  # wants 12 of 16
    assert decision.replicas == 16 and "still starting" in decision.reason
    grown = guarded(Reactive(), ctx(ready_replicas=10, starting_replicas=2, demand=105.0))  # wants 15 > 12
    assert grown.replicas == 15


def test_step_limits_and_bounds_give_kubernetes_reasons() -> None:
    settings = replace(FIXED_BAND, scale_up_rules=(("Pods", 4.0, 15.0),))
    limited = guarded(Reactive(), ctx(ready_replicas=2, demand=140.0, settings=settings))  # wants 20
    assert limited.replicas == 6 and limited.inputs["limit"] == "ScaleUpLimit"
    capped = guarded(Reactive(), ctx(demand=700.0, max_replicas=15))  # the step limit (20) is above the max
    assert capped.replicas == 15 and capped.inputs["limit"] == "TooManyReplicas"


def test_static_is_fixed_and_bypasses_the_rails() -> None:
    assert guarded(Static(), ctx(demand=700.0)).replicas == 1
    assert guarded(Static(), ctx(settings=PolicySettings(static_replicas=7))).replicas == 7


@pytest.mark.parametrize("value", [0.0, 2.0])
def test_settings_reject_a_target_out_of_range(value: float) -> None:
    with pytest.raises(ValueError, match="target_utilization"):
        PolicySettings(target_utilization=value)


UP_BY_4 = replace(FIXED_BAND, scale_up_rules=(("Pods", 4.0, 15.0),))


@pytest.mark.parametrize(
    ("policy", "context", "replicas", "code"),
    [
        (Static(), ctx(), 1, ReasonCode.STATIC_COUNT),
        (Reactive(), ctx(demand=140.0), 20, ReasonCode.REACTIVE_UTILIZATION),
        (Reactive(), ctx(demand=35.0, recent_recommendations=((10, 400.0),)), 5, ReasonCode.REACTIVE_UTILIZATION),
        (Reactive(), ctx(demand=75.0), 10, ReasonCode.WITHIN_TOLERANCE),
        (Reactive(), ctx(per_replica_capacity=None, demand=500.0), 10, ReasonCode.NO_CAPACITY),
        (Reactive(), ctx(demand=None), 10, ReasonCode.STALE_METRICS),
        (Reactive(), ctx(demand=20.0, demand_age_seconds=120.0), 10, ReasonCode.STALE_METRICS),
        (Predictive(), ctx(forecast=forecast(180.0)), 20, ReasonCode.FORECAST_PEAK),
        (Predictive(), ctx(forecast=forecast(80.0)), 10, ReasonCode.WITHIN_TOLERANCE),
        (Predictive(), ctx(demand=140.0, forecast=forecast(1000.0, stale=True)), 20, ReasonCode.FORECAST_STALE),
        (Predictive(), ctx(demand=140.0), 20, ReasonCode.FORECAST_STALE),  # no forecast at all
        (
            Predictive(),
            ctx(demand=140.0, forecast=forecast(1000.0, distrusted=WORSE)),
            20,
            ReasonCode.FORECAST_INACCURATE,
        ),
        (Hybrid(), ctx(demand=70.0, forecast=forecast(150.0, distrusted=WORSE)), 10, ReasonCode.FORECAST_INACCURATE),
        (Hybrid(), ctx(demand=70.0, forecast=forecast(150.0)), 17, ReasonCode.FORECAST_PEAK),
        (Hybrid(), ctx(demand=140.0, forecast=forecast(90.0)), 20, ReasonCode.REACTIVE_UTILIZATION),
        (Hybrid(), ctx(demand=140.0, forecast=forecast(90.0, stale=True)), 20, ReasonCode.FORECAST_STALE),
        (Reactive(), ctx(demand=35.0, recent_recommendations=((10, 60.0),)), 10, ReasonCode.SCALE_DOWN_STABILIZED),
        (Reactive(), ctx(demand=35.0, recent_recommendations=((7, 60.0),)), 7, ReasonCode.SCALE_DOWN_STABILIZED),
        (Predictive(), ctx(demand=70.0, forecast=forecast(30.0)), 8, ReasonCode.SCALE_DOWN_FLOOR),
        (Reactive(), ctx(ready_replicas=10, starting_replicas=6, demand=84.0), 16, ReasonCode.REPLICAS_STARTING),
        (Reactive(), ctx(ready_replicas=2, demand=140.0, settings=UP_BY_4), 6, ReasonCode.STEP_LIMIT),
        (Reactive(), ctx(demand=700.0, max_replicas=15), 15, ReasonCode.MAX_REPLICAS),
        (Reactive(), ctx(demand=7.0, min_replicas=4, recent_recommendations=()), 4, ReasonCode.MIN_REPLICAS),
    ],
)
def test_every_decision_carries_the_code_of_what_decided_its_replicas(
    policy: ScalingPolicy, context: PoolContext, replicas: int, code: ReasonCode
) -> None:
    """The rail that bound the policy's wish names the decision; the prose keeps the policy's reason beside it."""
    decision = guarded(policy, context)
    assert (decision.replicas, decision.code) == (replicas, code)


@pytest.mark.parametrize(
    ("code", "before", "after", "family"),
    [
        (ReasonCode.REACTIVE_UTILIZATION, 3, 5, "up"),
        (ReasonCode.REACTIVE_UTILIZATION, 5, 3, "down"),
        (ReasonCode.STEP_LIMIT, 2, 6, "up"),
        (ReasonCode.SCALE_DOWN_STABILIZED, 5, 5, "held"),
        (ReasonCode.STALE_METRICS, 5, 5, "held"),
        (ReasonCode.NO_CAPACITY, 5, 5, "refused"),
        (ReasonCode.NO_PLACEMENT, 0, 3, "refused"),
        (None, 1, 2, "up"),  # an event from before codes: by its direction
    ],
)
def test_each_code_falls_in_one_colour_family(code: ReasonCode | None, before: int, after: int, family: str) -> None:
    assert reason_family(code, before, after) == family


def test_the_bound_starts_at_the_forecasts_own_quantile_at_the_target() -> None:
    target = PolicySettings(attainment_target=0.99, predictive_utilization=1.0)
    assert ctx(settings=target).provisioning_scale == INITIAL_BAND_SCALE == 1.0
    # the band alone (yhat 100, hi 120): its 99 % point as a normal would have it, 100 + 20 × 2.326 / 1.645 = 128.3
    band = tuple((NOW + 60 * k, 100.0, 90.0, 120.0) for k in range(1, 16))
    decision = Predictive().decide(ctx(settings=target, forecast=ForecastView(NOW, band)))
    assert decision.inputs["forecast_upper"] == pytest.approx(128.28, abs=0.01) and decision.replicas == 13
    # a forecaster's own 99 % point wins over the band's guess: 150 → 15 replicas
    levels = (0.05, 0.5, 0.95, 0.99)
    grid = tuple((90.0, 100.0, 120.0, 150.0) for _ in band)
    own = Predictive().decide(ctx(settings=target, forecast=ForecastView(NOW, band, levels=levels, quantiles=grid)))
    assert own.inputs["forecast_upper"] == pytest.approx(150.0) and own.replicas == 15


def test_a_miss_widens_the_bound_by_what_the_target_says_hits_give_back() -> None:
    settings = PolicySettings(attainment_target=0.99, quantile_rate=0.1)
    assert adapted_band_scale(2.0, True, settings, 60.0) == pytest.approx(2.0 * math.exp(0.1 * 0.99))
    assert adapted_band_scale(2.0, False, settings, 60.0) == pytest.approx(2.0 * math.exp(-0.1 * 0.01))
    assert adapted_band_scale(2.0, True, settings, 600.0) == pytest.approx(2.0 * math.exp(0.99))  # per minute
    # 99 hits give back what one miss took: misses settle at the target's 1 %
    scale = adapted_band_scale(2.0, True, settings, 60.0)
    for _ in range(99):
        scale = adapted_band_scale(scale, False, settings, 60.0)
    assert scale == pytest.approx(2.0)
    assert adapted_band_scale(0.0, True, settings, 60.0) > 0.0  # a scale shrunk to nothing can grow again
    assert adapted_band_scale(2.0, True, replace(settings, attainment_target=None), 60.0) == 2.0  # fixed band


def test_predictive_sizes_on_the_adapted_bound_and_says_so() -> None:
    adapted = replace(FIXED_BAND, attainment_target=0.95, predictive_utilization=1.0)
    # yhat 80, hi 100 (the 95 % point): a scale of 2 puts the bound at 80 + 2 × 20 = 120 → 12 replicas of 10
    view = replace(forecast(100.0), model="auto[prior]")
    decision = Predictive().decide(ctx(forecast=view, settings=adapted, band_scale=2.0))
    assert decision.replicas == 12 and decision.inputs["band_scale"] == 2.0
    assert "forecast bound 120 (auto[prior]'s 95.0% quantile, its excess over yhat × 2 toward 95.0% attainment)" in (
        decision.reason
    )
    assert Predictive().decide(ctx(forecast=view, settings=adapted, band_scale=0.0)).replicas == 8
    fixed = Predictive().decide(ctx(forecast=view, settings=replace(adapted, attainment_target=None)))
    assert fixed.replicas == 10 and "auto[prior]'s 95 % point, as it is" in fixed.reason


@pytest.mark.parametrize("bad", [{"attainment_target": 1.0}, {"attainment_target": 0.2}, {"quantile_rate": -0.1}])
def test_attainment_settings_out_of_range_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        PolicySettings(**bad)  # type: ignore[arg-type]


def test_a_measured_startup_is_the_horizon_and_the_reason_says_so() -> None:
    decision = Predictive().decide(ctx(forecast=forecast(100.0), startup_seconds=180.0, startup_measurements=3))
    assert "between +180 s (the startup measured over 3 scale-ups) and +240 s" in decision.reason
    assert (decision.inputs["startup_seconds"], decision.inputs["startup_measurements"]) == (180.0, 3)
    assert "measured" not in Predictive().decide(ctx(forecast=forecast(100.0))).reason


def test_every_policy_a_pool_can_name_is_registered_under_that_name() -> None:
    assert list(POLICIES) == list(Policy)
    assert [make_policy(name).name for name in Policy] == list(Policy)
    with pytest.raises(ValueError, match="unknown policy 'manual'; known: static, reactive, predictive, hybrid"):
        make_policy("manual")


@pytest.mark.parametrize(
    ("policy", "context"),
    [
        (Static(), ctx()),
        (Reactive(), ctx(demand=35.0, recent_recommendations=((10, 60.0),))),  # 5 recommended, the window holds 10
        (Predictive(), ctx(forecast=forecast(180.0, stale=True))),
        (Hybrid(), ctx(ready_replicas=20, demand=126.0, forecast=forecast(150.0))),
    ],
)
def test_a_recorded_decision_carries_its_recommendation_first_among_its_inputs(
    policy: ScalingPolicy, context: PoolContext
) -> None:
    decision = guarded(policy, context)
    recorded = decision.recorded_inputs()
    assert next(iter(recorded)) == "recommended" and recorded["recommended"] == decision.recommended
    assert {k: v for k, v in recorded.items() if k != "recommended"} == dict(decision.inputs)
