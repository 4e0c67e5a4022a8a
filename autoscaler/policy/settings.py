"""The knobs of every scaling policy (:class:`PolicySettings`): the reactive target and tolerance, HPA's window and
step limits, the predictive policy's utilization, margin and attainment target. Validated when built, so a context
never carries a knob no policy can use."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.hpa import (
    KUBERNETES_SCALE_DOWN_POLICIES,
    KUBERNETES_SCALE_DOWN_WINDOW_S,
    KUBERNETES_SCALE_UP_POLICIES,
    ScalingRule,
)
from fleet.pools import DEFAULT_SLO_ATTAINMENT


@dataclass(frozen=True)
class PolicySettings:
    """The knobs of every policy; the defaults are what a pool gets unless its operator says otherwise."""

    target_utilization: float = 0.7  # reactive: HPA target, demand per ready replica over its capacity
    predictive_utilization: float = 1.0  # predictive: how full the forecast's bound may make each replica
    margin_seconds: float = 60.0  # predictive: cover [startup, startup + margin) ahead (one decision interval or more)
    tolerance: float = 0.1
    stabilization_window_seconds: float = KUBERNETES_SCALE_DOWN_WINDOW_S
    stale_after_seconds: float = 30.0  # demand older than this is stale: no scale-down on it
    scale_up_rules: tuple[ScalingRule, ...] = KUBERNETES_SCALE_UP_POLICIES  # HPA's defaults
    scale_down_rules: tuple[ScalingRule, ...] = KUBERNETES_SCALE_DOWN_POLICIES
    static_replicas: int | None = None  # static: this count (default min_replicas)
    # predictive: the share of time the ready replicas should carry the demand; the forecast's bound is scaled toward
    # it (:func:`autoscaler.policy.band_scale.adapted_band_scale`). None: the forecast's 95 % upper bound, fixed.
    attainment_target: float | None = DEFAULT_SLO_ATTAINMENT
    quantile_rate: float = 0.02  # how fast the band scale follows misses and hits (quantile tracking's eta), per minute

    def __post_init__(self) -> None:
        for name in ("target_utilization", "predictive_utilization"):
            value = getattr(self, name)
            if not (0 < value <= 1.5):
                raise ValueError(f"{name}: must be in (0, 1.5], got {value}")
        if self.attainment_target is not None and not (0.5 <= self.attainment_target < 1):
            raise ValueError(f"attainment_target: must be in [0.5, 1), got {self.attainment_target}")
        if not (0 <= self.quantile_rate <= 10):
            raise ValueError(f"quantile_rate: must be in [0, 10], got {self.quantile_rate}")
        if self.margin_seconds < 0 or self.stabilization_window_seconds < 0 or self.stale_after_seconds <= 0:
            raise ValueError("margin_seconds and stabilization_window_seconds must be >= 0, stale_after_seconds > 0")
