"""The HPA port, case by case against Kubernetes' own tests (pkg/controller/podautoscaler).

Each case id is the Kubernetes test (or table entry) it ports. Kubernetes states CPU as milli-cores over requests of
1000m; here a sample is the replica's utilization in percent, so level 300 on a 1.0 CPU request becomes 30.0. Pods
with a deletion timestamp are "failed" here (both are dropped), and hot-CPU pods are "unready" (both are set aside).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.hpa import (
    KUBERNETES_SCALE_DOWN_POLICIES,
    KUBERNETES_SCALE_UP_POLICIES,
    ReplicaSample,
    desired_replicas,
    external_desired_replicas,
    rate_limited,
    stabilized,
)


def ready(*values: float) -> list[ReplicaSample]:
    return [ReplicaSample(value) for value in values]


def unready(value: float) -> ReplicaSample:
    return ReplicaSample(value, "unready")


MISSING = ReplicaSample(None)
PENDING = ReplicaSample(None, "pending")
FAILED = ReplicaSample(None, "failed")
# Kubernetes fills a missing pod with max(100 %, target) of its request on a resource scale-down
CPU_FILL = {"missing_fill_down": 100.0}
PLAIN = {"readiness_matters": False}  # custom (pods) metrics: readiness is not checked

# (current, samples, target, options, expected)
REPLICA_CALC_CASES = [
    pytest.param(3, ready(30, 50, 70), 30, {}, 5, id="TestReplicaCalcScaleUp"),
    pytest.param(3, [unready(30), *ready(50, 70)], 30, {}, 4, id="TestReplicaCalcScaleUpUnreadyLessScale"),
    pytest.param(3, [*ready(40), unready(50), unready(70)], 30, {}, 3, id="TestReplicaCalcScaleUpUnreadyNoScale"),
    pytest.param(2, [*ready(50, 70), FAILED, FAILED], 30, {}, 4, id="TestReplicaCalcScaleUpIgnoresFailedPods"),
    pytest.param(3, ready(20000, 10000, 30000), 15000, PLAIN, 4, id="TestReplicaCalcScaleUpCM"),
    pytest.param(
        3,
        [*ready(50000, 10000), unready(30000)],
        15000,
        PLAIN,
        6,
        id="TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale",
    ),
    pytest.param(
        3,
        [unready(50000), *ready(15000), unready(30000)],
        15000,
        PLAIN,
        7,
        id="TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown",
    ),
    pytest.param(5, ready(10, 30, 50, 25, 25), 50, {}, 3, id="TestReplicaCalcScaleDown"),
    pytest.param(5, ready(12000, 12000, 12000, 12000, 12000), 20000, PLAIN, 3, id="TestReplicaCalcScaleDownCM"),
    pytest.param(
        5, [*ready(10, 30, 50), unready(25), unready(25)], 50, {}, 2, id="TestReplicaCalcScaleDownIncludeUnreadyPods"
    ),
    pytest.param(
        5,
        [*ready(10), PENDING, PENDING, PENDING, PENDING],
        50,
        {},
        1,
        id="TestReplicaCalcScaleDownExcludeUnscheduledPods",
    ),
    pytest.param(
        5, [*ready(10, 30, 50, 25, 25), FAILED, FAILED], 50, {}, 3, id="TestReplicaCalcScaleDownIgnoresFailedPods"
    ),
    # requests 0.9, 1.0, 1.1 CPU with 1010m, 1030m, 1020m used
    pytest.param(3, ready(1010 / 9, 103, 1020 / 11), 100, {}, 3, id="TestReplicaCalcTolerance"),
    pytest.param(3, ready(20000, 21000, 21000), 20000, PLAIN, 3, id="TestReplicaCalcToleranceCM"),
    pytest.param(
        3, ready(101, 101, 101), 100, {"tolerance": (0.0, 0.0)}, 4, id="TestReplicaCalcConfigurableTolerance/0%"
    ),
    pytest.param(
        3,
        ready(1890 / 9, 191, 1900 / 11),
        100,
        {"tolerance": (0.1, 2.0)},
        3,
        id="TestReplicaCalcConfigurableTolerance/within 200% scale-up",
    ),
    pytest.param(
        3,
        ready(1100 / 9, 108, 1090 / 11),
        100,
        {"tolerance": (2.0, 0.08)},
        4,
        id="TestReplicaCalcConfigurableTolerance/outside 8% scale-up",
    ),
    pytest.param(
        3,
        ready(660 / 9, 64, 650 / 11),
        100,
        {"tolerance": (0.36, 0.1)},
        3,
        id="TestReplicaCalcConfigurableTolerance/within 36% scale-down",
    ),
    pytest.param(
        3,
        ready(660 / 9, 64, 650 / 11),
        100,
        {"tolerance": (0.34, 0.1)},
        2,
        id="TestReplicaCalcConfigurableTolerance/outside 34% scale-down",
    ),
    pytest.param(
        3,
        ready(20000, 21000, 21000),
        20000,
        {**PLAIN, "tolerance": (0.1, 0.01)},
        4,
        id="TestReplicaCalcConfigurableToleranceCM",
    ),
    pytest.param(4, [*ready(40, 9.5), MISSING, MISSING], 100, {}, 3, id="TestReplicaCalcMissingMetrics"),
    pytest.param(2, [*ready(100), MISSING], 100, {}, 2, id="TestReplicaCalcMissingMetricsNoChangeEq"),
    pytest.param(2, [*ready(190), MISSING], 100, {}, 2, id="TestReplicaCalcMissingMetricsNoChangeGt"),
    pytest.param(2, [*ready(60), MISSING], 100, {}, 2, id="TestReplicaCalcMissingMetricsNoChangeLt"),
    pytest.param(
        5,
        [*ready(20000, 19000, 21000), MISSING, MISSING],
        20000,
        PLAIN,
        5,
        id="TestPlainMetricReplicaCalcMissingMetricsNoChangeEq",
    ),
    pytest.param(
        3, [unready(10), *ready(45), MISSING], 50, CPU_FILL, 3, id="TestReplicaCalcMissingMetricsUnreadyChange"
    ),
    pytest.param(3, [unready(10), *ready(200), MISSING], 50, {}, 4, id="TestReplicaCalcMissingMetricsUnreadyScaleUp"),
    pytest.param(
        4, [unready(10), *ready(10, 10), MISSING], 50, CPU_FILL, 3, id="TestReplicaCalcMissingMetricsUnreadyScaleDown"
    ),
    # requests 1, 1, 2, 2 CPU; the fill is max(100 %, 300 %) = the target, the default
    pytest.param(
        4, [unready(20), *ready(10, 5), MISSING], 300, {}, 2, id="TestReplicaCalcMissingMetricsScaleDownTargetOver100"
    ),
    pytest.param(2, [*ready(10, 10), MISSING], 50, CPU_FILL, 2, id="TestReplicaCalcDuringRollingUpdateWithMaxSurge"),
    pytest.param(
        2, [*ready(10000, 10000), MISSING], 17000, PLAIN, 2, id="TestReplicaCalcDuringRollingUpdateWithMaxSurgeCM"
    ),
    # 10 pods at 50 % against int((1 / (2 × 0.9) + 0.01) × 100) = 56 %, then against 55 %
    pytest.param(10, ready(*[50] * 10), 56, {}, 9, id="TestReplicaCalcComputedToleranceAlgImplementation/scale"),
    pytest.param(10, ready(*[50] * 10), 55, {}, 10, id="TestReplicaCalcComputedToleranceAlgImplementation/unscale"),
    # groupPods puts pending pods with the unready ones: 0 on a scale-up, 40 % / 30 % × 3 → 4
    pytest.param(3, [PENDING, *ready(50, 70)], 30, PLAIN, 4, id="TestGroupPods/pending pods are unready"),
]


@pytest.mark.parametrize(("current", "samples", "target", "options", "expected"), REPLICA_CALC_CASES)
def test_desired_replicas_matches_kubernetes(
    current: int, samples: list[ReplicaSample], target: float, options: dict[str, Any], expected: int
) -> None:
    assert desired_replicas(current, samples, target, **options) == expected


def test_no_ready_sample_is_an_error_like_kubernetes() -> None:
    """TestReplicaCalcEmptyMetrics: "did not receive metrics for targeted pods (pods might be unready)"."""
    with pytest.raises(ValueError, match="samples"):
        desired_replicas(3, [unready(50), PENDING, MISSING], 50)


# (current, ready, total, target, per_replica, tolerance, expected)
EXTERNAL_CASES = [
    pytest.param(1, 1, 8600, 4400, False, 0.1, 2, id="TestReplicaCalcScaleUpCMExternal"),
    pytest.param(3, 1, 8600, 4400, False, 0.1, 2, id="TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods"),
    pytest.param(3, 3, 8600, 2150, True, 0.1, 4, id="TestReplicaCalcScaleUpPerPodCMExternal"),
    pytest.param(5, 5, 8600, 14334, False, 0.1, 3, id="TestReplicaCalcScaleDownCMExternal"),
    pytest.param(5, 5, 8600, 2867, True, 0.1, 3, id="TestReplicaCalcScaleDownPerPodCMExternal"),
    pytest.param(3, 3, 8600, 8888, False, 0.1, 3, id="TestReplicaCalcToleranceCMExternal"),
    pytest.param(3, 3, 8600, 2900, True, 0.1, 3, id="TestReplicaCalcTolerancePerPodCMExternal"),
    pytest.param(3, 3, 8900, 8800, False, (0.1, 0.01), 4, id="TestReplicaCalcConfigurableToleranceCMExternal"),
    pytest.param(3, 3, 8600, 2800, True, (0.1, 0.01), 4, id="TestReplicaCalcConfigurableTolerancePerPodCMExternal"),
    # object metrics use the same two formulas
    pytest.param(3, 3, 20000, 15000, False, 0.1, 4, id="TestReplicaCalcScaleUpCMObject"),
    pytest.param(3, 1, 50000, 10000, False, 0.1, 5, id="TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods"),
    pytest.param(5, 5, 12000, 20000, False, 0.1, 3, id="TestReplicaCalcScaleDownCMObject"),
    pytest.param(3, 3, 20000, 5000, True, 0.1, 4, id="TestReplicaCalcScaleUpCMPerPodObject"),
    pytest.param(5, 5, 6000, 2000, True, 0.1, 3, id="TestReplicaCalcScaleDownPerPodCMObject"),
    pytest.param(4, 4, 20166, 5000, True, 0.1, 4, id="TestReplicaCalcTolerancePerPodCMObject"),
    pytest.param(4, 4, 20208, 5000, True, (0.1, 0.01), 5, id="TestReplicaCalcConfigurableTolerancePerPodCMObject"),
    # getUsageRatioReplicaCount: from zero replicas, ceil(usage ratio) without tolerance
    pytest.param(0, 0, 8600, 4400, False, 0.1, 2, id="getUsageRatioReplicaCount/scale from zero"),
    pytest.param(0, 0, 0, 4400, False, 0.1, 0, id="getUsageRatioReplicaCount/stay at zero"),
]


@pytest.mark.parametrize(
    ("current", "ready_replicas", "total", "target", "per_replica", "tolerance", "expected"), EXTERNAL_CASES
)
def test_external_desired_replicas_matches_kubernetes(
    current: int,
    ready_replicas: int,
    total: float,
    target: float,
    per_replica: bool,
    tolerance: float | tuple[float, float],
    expected: int,
) -> None:
    got = external_desired_replicas(
        current, ready_replicas, total, target, per_replica=per_replica, tolerance=tolerance
    )
    assert got == expected


UP_DEFAULT, DOWN_DEFAULT = KUBERNETES_SCALE_UP_POLICIES, KUBERNETES_SCALE_DOWN_POLICIES


def rules(pods: float, percent: float, period_s: float = 60) -> list[tuple[str, float, float]]:
    """Kubernetes' generateScalingRules: a Pods and a Percent policy, each only when non-zero."""
    policies = []
    if pods:
        policies.append(("Pods", pods, period_s))
    if percent:
        policies.append(("Percent", percent, period_s))
    return policies


# (current, desired, min, max, up, down, select_policy, expected replicas, expected reason)
SCALING_WITH_RULES_CASES = [
    pytest.param(5, 7, 3, 8, UP_DEFAULT, DOWN_DEFAULT, "Max", 7, "DesiredWithinRange", id="within range"),
    pytest.param(3, 1, 2, 8, UP_DEFAULT, DOWN_DEFAULT, "Max", 2, "TooFewReplicas", id="desired < minReplicas"),
    pytest.param(1, 0, 0, 10, UP_DEFAULT, DOWN_DEFAULT, "Max", 0, "DesiredWithinRange", id="within range, min 0"),
    pytest.param(
        100, 1000, 100, 150, UP_DEFAULT, DOWN_DEFAULT, "Max", 150, "TooManyReplicas", id="more than the maximum"
    ),
    pytest.param(
        3, 1000, 1, 2000, rules(0, 1), DOWN_DEFAULT, "Max", 4, "ScaleUpLimit", id="scaleUpLimit with user policies"
    ),
    pytest.param(
        1000, 3, 3, 2000, UP_DEFAULT, rules(20, 0), "Max", 980, "ScaleDownLimit", id="scaleDownLimit with user policies"
    ),
    pytest.param(10, 50, 1, 1000, UP_DEFAULT, DOWN_DEFAULT, "Max", 20, "ScaleUpLimit", id="scaleUp default behavior"),
    pytest.param(
        10, 500, 1, 1000, rules(100, 100), DOWN_DEFAULT, "Max", 110, "ScaleUpLimit", id="scaleUp pods > percent"
    ),
    pytest.param(10, 500, 1, 1000, rules(2, 100), DOWN_DEFAULT, "Max", 20, "ScaleUpLimit", id="scaleUp percent > pods"),
    pytest.param(
        10, 50, 1, 1000, rules(100, 0), DOWN_DEFAULT, "Max", 50, "DesiredWithinRange", id="scaleUp large pod policy"
    ),
    pytest.param(10, 50, 1, 1000, rules(30, 0), DOWN_DEFAULT, "Max", 40, "ScaleUpLimit", id="scaleUp pod limitation"),
    pytest.param(
        10, 50, 1, 1000, rules(0, 200), DOWN_DEFAULT, "Max", 30, "ScaleUpLimit", id="scaleUp percent limitation"
    ),
    pytest.param(100, 2, 1, 1000, UP_DEFAULT, rules(20, 1), "Max", 80, "ScaleDownLimit", id="scaleDown percent > pods"),
    pytest.param(100, 2, 1, 1000, UP_DEFAULT, rules(2, 1), "Max", 98, "ScaleDownLimit", id="scaleDown pods > percent"),
    pytest.param(
        10, 0, 1, 1000, UP_DEFAULT, rules(100, 0), "Max", 1, "TooFewReplicas", id="scaleDown MinReplicas, large pods"
    ),
    pytest.param(
        10, 2, 5, 1000, UP_DEFAULT, rules(0, 100), "Max", 5, "TooFewReplicas", id="scaleDown MinReplicas, large percent"
    ),
    pytest.param(10, 2, 1, 1000, UP_DEFAULT, rules(5, 0), "Max", 5, "ScaleDownLimit", id="scaleDown pod limitation"),
    pytest.param(
        10, 5, 1, 1000, UP_DEFAULT, rules(0, 50), "Max", 5, "DesiredWithinRange", id="scaleDown percent limitation"
    ),
]


@pytest.mark.parametrize(
    ("current", "desired", "min_replicas", "max_replicas", "up", "down", "select", "expected", "reason"),
    SCALING_WITH_RULES_CASES,
)
def test_scaling_with_rules(
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    up: list[tuple[str, float, float]],
    down: list[tuple[str, float, float]],
    select: str,
    expected: int,
    reason: str,
) -> None:
    """TestScalingWithRules (convertDesiredReplicasWithBehaviorRate), the cases without earlier scale events."""
    got = rate_limited(
        current,
        desired,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        scale_up_policies=up,
        scale_down_policies=down,
        select_policy=select,
    )
    assert got == (expected, reason)


def test_calculate_scale_up_limit_with_scaling_rules_min() -> None:
    """TestCalculateScaleUpLimitWithScalingRules: Min of 1 + 2 pods and ceil(1 × 1.5) = 2."""
    got = rate_limited(
        1,
        10,
        min_replicas=1,
        max_replicas=100,
        scale_up_policies=rules(2, 50),
        scale_down_policies=[],
        select_policy="Min",
    )
    assert got == (2, "ScaleUpLimit")


def test_calculate_scale_down_limit_with_behaviors_min() -> None:
    """TestCalculateScaleDownLimitWithBehaviors: Min of 5 − 2 pods and floor(5 × 0.5) = 2 keeps 3."""
    got = rate_limited(
        5,
        1,
        min_replicas=1,
        max_replicas=100,
        scale_up_policies=[],
        scale_down_policies=rules(2, 50),
        select_policy="Min",
    )
    assert got == (3, "ScaleDownLimit")


@pytest.mark.parametrize(("desired", "reason"), [(9, "ScaleUpLimit"), (2, "ScaleDownLimit")])
def test_disabled_policy_select_keeps_current_replicas(desired: int, reason: str) -> None:
    """DisabledPolicySelect: calculateScale{Up,Down}Limit return currentReplicas ("Scaling is disabled")."""
    got = rate_limited(
        5,
        desired,
        min_replicas=1,
        max_replicas=10,
        scale_up_policies=UP_DEFAULT,
        scale_down_policies=DOWN_DEFAULT,
        select_policy="Disabled",
    )
    assert got == (5, reason)


@pytest.mark.parametrize(
    ("current", "desired", "min_replicas", "max_replicas", "expected"),
    [
        pytest.param(6, 3, 2, 5, (5, "TooManyReplicas"), id="TestScaleDownRCImmediately"),
        pytest.param(1, 1, 2, 6, (2, "TooFewReplicas"), id="TestScaleUpRCImmediately"),
        pytest.param(
            20, 1000, 1, 10, (10, "TooManyReplicas"), id="maxReplicas is the limit because maxReplicas < limit"
        ),
    ],
)
def test_current_outside_bounds_goes_to_the_bound_at_once(
    current: int, desired: int, min_replicas: int, max_replicas: int, expected: tuple[int, str]
) -> None:
    """reconcileAutoscaler: "Current number of replicas above Spec.MaxReplicas" / "below Spec.MinReplicas"."""
    got = rate_limited(
        current,
        desired,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        scale_up_policies=UP_DEFAULT,
        scale_down_policies=DOWN_DEFAULT,
    )
    assert got == expected


def test_empty_policies_do_not_limit() -> None:
    got = rate_limited(2, 40, min_replicas=1, max_replicas=50, scale_up_policies=[], scale_down_policies=[])
    assert got == (40, "DesiredWithinRange")
    got = rate_limited(40, 1, min_replicas=1, max_replicas=50, scale_up_policies=[], scale_down_policies=[])
    assert got == (1, "DesiredWithinRange")


def test_percent_limit_ignores_float_noise() -> None:
    """100 × (1 + 10 / 100) is 110.00000000000001 in floating point; the limit is 110."""
    got = rate_limited(
        100, 500, min_replicas=1, max_replicas=1000, scale_up_policies=rules(0, 10), scale_down_policies=[]
    )
    assert got == (110, "ScaleUpLimit")


# (recommendation, recent (replicas, age_s), window_s, expected)
STABILIZATION_CASES = [
    pytest.param(5, [], 300, 5, id="TestNormalizeDesiredReplicas/empty log"),
    pytest.param(3, [(4, 120), (5, 60)], 300, 5, id="TestNormalizeDesiredReplicas/stabilize"),
    pytest.param(3, [(1, 120), (2, 60)], 300, 3, id="TestNormalizeDesiredReplicas/no stabilize"),
    pytest.param(3, [(10, 600), (9, 540)], 300, 3, id="TestNormalizeDesiredReplicas/no stabilize - old"),
    pytest.param(
        3, [(10, 600), (4, 60), (5, 120), (9, 540)], 300, 5, id="TestNormalizeDesiredReplicas/stabilize - old"
    ),
    pytest.param(3, [(4, 120), (5, 60)], 180, 5, id="TestNormalizeDesiredReplicasWithBehavior/simple scale down"),
    pytest.param(3, [(1, 120), (2, 60)], 0, 3, id="TestNormalizeDesiredReplicasWithBehavior/no scale down"),
    pytest.param(
        3,
        [(10, 600), (4, 60), (5, 120), (9, 540)],
        180,
        5,
        id="TestNormalizeDesiredReplicasWithBehavior/reuse obsolete element",
    ),
]


@pytest.mark.parametrize(("recommendation", "recent", "window_s", "expected"), STABILIZATION_CASES)
def test_stabilized_matches_kubernetes(
    recommendation: int, recent: list[tuple[int, float]], window_s: float, expected: int
) -> None:
    assert stabilized(recommendation, recent, window_s) == expected


def test_stabilization_window_includes_its_edge() -> None:
    assert stabilized(3, [(7, 300.0)], 300) == 7
    assert stabilized(3, [(7, 300.5)], 300) == 3


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: desired_replicas(-1, ready(1), 1), "current_replicas"),
        (lambda: desired_replicas(1, ready(1), 0), "target"),
        (lambda: desired_replicas(1, ready(1), 1, tolerance=-0.1), "tolerance"),
        (lambda: desired_replicas(1, ready(1), 1, missing_fill_down=-1), "missing_fill_down"),
        (lambda: ReplicaSample(1.0, "starting"), "state"),
        (lambda: ReplicaSample(-1.0), "value"),
        (lambda: external_desired_replicas(1, -1, 1, 1, per_replica=True), "ready_replicas"),
        (lambda: external_desired_replicas(1, 1, -1, 1, per_replica=True), "total"),
        (lambda: external_desired_replicas(1, 1, 1, -1, per_replica=False), "target"),
        (
            lambda: rate_limited(1, -1, min_replicas=1, max_replicas=2, scale_up_policies=[], scale_down_policies=[]),
            "desired",
        ),
        (
            lambda: rate_limited(1, 1, min_replicas=3, max_replicas=2, scale_up_policies=[], scale_down_policies=[]),
            "max_replicas",
        ),
        (
            lambda: rate_limited(
                1, 2, min_replicas=1, max_replicas=2, scale_up_policies=[("Replicas", 1, 15)], scale_down_policies=[]
            ),
            "scale_up_policies",
        ),
        (
            lambda: rate_limited(
                1, 2, min_replicas=1, max_replicas=2, scale_up_policies=[], scale_down_policies=[("Pods", 1.5, 15)]
            ),
            "scale_down_policies",
        ),
        (
            lambda: rate_limited(
                1, 2, min_replicas=1, max_replicas=2, scale_up_policies=[], scale_down_policies=[], select_policy="Avg"
            ),
            "select_policy",
        ),
        (lambda: stabilized(1, [(2, -1.0)], 60), "recent"),
        (lambda: stabilized(1, [], -1), "window_s"),
    ],
)
def test_bad_input_names_the_argument(call: Any, argument: str) -> None:
    with pytest.raises(ValueError, match=f"^{argument}:"):
        call()


policies = st.lists(
    st.tuples(st.sampled_from(["Pods", "Percent"]), st.integers(1, 500).map(float), st.just(15.0)), max_size=3
)


@given(
    current=st.integers(0, 200),
    desired=st.integers(0, 400),
    bounds=st.tuples(st.integers(0, 100), st.integers(0, 200)).map(sorted),
    up=policies,
    down=policies,
    select=st.sampled_from(["Max", "Min", "Disabled"]),
)
def test_rate_limited_stays_within_min_and_max(
    current: int,
    desired: int,
    bounds: list[int],
    up: list[tuple[str, float, float]],
    down: list[tuple[str, float, float]],
    select: str,
) -> None:
    min_replicas, max_replicas = bounds
    replicas, reason = rate_limited(
        current,
        desired,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        scale_up_policies=up,
        scale_down_policies=down,
        select_policy=select,
    )
    assert min_replicas <= replicas <= max_replicas
    assert reason in {"ScaleUpLimit", "ScaleDownLimit", "TooManyReplicas", "TooFewReplicas", "DesiredWithinRange"}
    assert reason != "DesiredWithinRange" or replicas == desired


@given(
    current=st.integers(1, 100),
    values=st.lists(st.floats(0.01, 1000), min_size=1, max_size=20),
    down=st.floats(0.01, 0.5),
    up=st.floats(0.01, 2),
    position=st.floats(0.01, 0.99),
)
def test_within_tolerance_keeps_the_current_replicas(
    current: int, values: list[float], down: float, up: float, position: float
) -> None:
    ratio = (1 - down) + position * (down + up)  # inside [1 − down, 1 + up] by at least 1 % of its width
    mean = sum(values) / len(values)
    assert desired_replicas(current, ready(*values), mean / ratio, tolerance=(down, up)) == current
    per_replica_target = sum(values) / ratio / current
    got = external_desired_replicas(
        current, current, sum(values), per_replica_target, per_replica=True, tolerance=(down, up)
    )
    assert got == current


@given(
    current=st.integers(1, 100),
    values=st.lists(st.floats(0.01, 1000), min_size=1, max_size=20),
    target=st.floats(0.01, 1000),
)
def test_with_every_replica_ready_the_answer_is_ceil_of_ratio_times_ready(
    current: int, values: list[float], target: float
) -> None:
    ratio = sum(values) / len(values) / target
    got = desired_replicas(current, ready(*values), target)
    if abs(ratio - 1) <= 0.1:
        assert got == current
    else:
        assert ratio * len(values) - 1e-6 <= got < ratio * len(values) + 1
