"""What a scaling policy takes and returns, pure: one frozen :class:`PoolContext` in, one :class:`Decision` with its
reason out: the reason in words and its :class:`~autoscaler.scaling_events.ReasonCode`, the code of the rule that
decided the replicas.

The live controller and ``fleetpilot simulate`` build the same context (from storage, or from a trace) and call the
same policies, so what the simulator measures is what the fleet runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from autoscaler.policy.band_scale import INITIAL_BAND_SCALE
from autoscaler.policy.settings import PolicySettings
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Policy
from predictor.base import Forecast
from predictor.distribution import quantile

InputValue = float | int | str | bool | None


@dataclass(frozen=True)
class ForecastView:
    """The pool's latest demand forecast: points (ts, yhat, lo, hi) after ``origin_ts``, and the forecaster's own
    quantiles at ``levels`` per point when it gives them; ``stale`` if it failed."""

    origin_ts: float
    points: tuple[tuple[float, float, float, float], ...]
    stale: bool = False
    error: str | None = None
    distrusted: str | None = None  # why its live accuracy says not to follow it (predictor.accuracy); None: trusted
    levels: tuple[float, ...] = ()
    quantiles: tuple[tuple[float, ...], ...] = ()  # per point, at ``levels``
    model: str | None = None  # which forecaster made it ("auto[prior]", ...)

    def bounds(self, level: float, scale: float) -> tuple[tuple[float, float], ...]:
        """(ts, bound) per point: yhat + ``scale`` × (the quantile at ``level`` − yhat), the quantile the
        forecaster's own where it gives one, else read from its band as a normal would
        (:mod:`predictor.distribution`): yhat 100, hi 120, level 0.99, scale 1 → 128.3."""
        return tuple((p[0], p[1] + scale * (q - p[1])) for p, q in zip(self.points, self._quantile(level), strict=True))

    def _quantile(self, level: float) -> tuple[float, ...]:
        """Each point's quantile at ``level``, computed once per level (the simulator asks at every step)."""
        cache: dict[float, tuple[float, ...]] = self.__dict__.setdefault("_quantiles_at", {})
        if level not in cache:
            if not self.points:
                return ()
            columns = np.array(self.points).T
            forecast = Forecast(
                columns[1], columns[2], columns[3], self.levels, np.array(self.quantiles) if self.levels else None
            )
            cache[level] = tuple(quantile(forecast, level).tolist())
        return cache[level]


@dataclass(frozen=True)
class PoolContext:
    """Everything a decision may use, at ``now``; demand and capacity in the pool's demand unit per second."""

    now: float
    min_replicas: int
    max_replicas: int
    ready_replicas: int
    starting_replicas: int
    per_replica_capacity: float | None  # None: not measured or configured (only static can act)
    demand: float | None  # the latest demand; None: no fresh sample
    demand_age_seconds: float | None
    startup_seconds: float
    forecast: ForecastView | None = None
    startup_measurements: int = 0  # the scale-ups ``startup_seconds`` was measured over; 0: as configured
    recent_recommendations: tuple[tuple[int, float], ...] = ()  # (replicas, age_s) of earlier decisions
    settings: PolicySettings = field(default_factory=PolicySettings)
    # what :func:`~autoscaler.policy.band_scale.adapted_band_scale` reached; None: where it starts
    band_scale: float | None = None

    @property
    def provisioning_scale(self) -> float:
        """How many of the forecast's own excess of its target quantile over yhat the predictive policy
        provisions for (1: the quantile itself)."""
        return self.band_scale if self.band_scale is not None else INITIAL_BAND_SCALE

    @property
    def current_replicas(self) -> int:
        """Replicas asked for and not yet gone: ready plus still starting."""
        return self.ready_replicas + self.starting_replicas

    @property
    def demand_is_fresh(self) -> bool:
        age = self.demand_age_seconds
        return self.demand is not None and age is not None and age <= self.settings.stale_after_seconds


@dataclass(frozen=True)
class Decision:
    """The replicas the pool should have, which policy said so, why (in words and as a code), what the policy
    recommended, and the inputs that mattered."""

    replicas: int
    policy: str
    reason: str
    inputs: Mapping[str, InputValue] = field(default_factory=dict)
    code: ReasonCode = field(kw_only=True)
    recommended: int = field(kw_only=True)  # what the policy wanted before the safety rails (the window remembers it)

    def recorded_inputs(self) -> dict[str, InputValue]:
        """The inputs as a scaling event stores and answers them: ``recommended`` first, then the policy's."""
        return {"recommended": self.recommended, **self.inputs}


class ScalingPolicy(Protocol):
    """What decides a pool's replicas (static, reactive, predictive, hybrid); the pool's ``policy`` names one."""

    @property
    def name(self) -> Policy: ...

    def decide(self, ctx: PoolContext) -> Decision: ...


def hold(ctx: PoolContext, policy: str, reason: str, code: ReasonCode) -> Decision:
    """The current replicas kept, and recommended: what a policy answers when it has nothing to size by."""
    return Decision(ctx.current_replicas, policy, reason, code=code, recommended=ctx.current_replicas)
