"""The ``hybrid`` policy: the larger of reactive and predictive while reactive scales up (a forecast that
under-shoots cannot starve the pool of what the queue shows it needs now); otherwise a usable forecast asking for
fewer may lead the scale-down, never below what today's demand needs at the predictive utilization."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.policy.decision import Decision, PoolContext
from autoscaler.policy.predictive import Predictive, per_replica_target, replicas_for
from autoscaler.policy.reactive import Reactive
from fleet.pools import Policy


class Hybrid:
    """The larger of reactive and predictive while reactive scales up; a forecast below reactive leads a scale-down
    (:func:`_forecast_may_lead_down`)."""

    name = Policy.HYBRID

    def __init__(self) -> None:
        self.reactive = Reactive()
        self.predictive = Predictive(fallback=self.reactive)

    def decide(self, ctx: PoolContext) -> Decision:
        reactive = self.reactive.decide(ctx)
        predictive = self.predictive.decide(ctx)
        chosen = predictive if predictive.replicas > reactive.replicas else reactive
        leads = _forecast_may_lead_down(ctx, reactive, predictive)
        if leads is not None:
            chosen = leads
        # with the forecast off both say the same count: say why the forecast had no part (ForecastStale)
        code = predictive.code if predictive.inputs.get("predictive") == "off" else chosen.code
        inputs = {**predictive.inputs, **reactive.inputs}  # reactive's target: the floor
        inputs["reactive_replicas"] = reactive.replicas
        inputs["predictive_replicas"] = predictive.replicas
        return Decision(
            chosen.replicas,
            self.name,
            f"hybrid: {'the forecast leads the scale-down' if leads is not None else 'max'} of [{reactive.reason}] and "
            f"[{predictive.reason}]",
            inputs,
            code=code,
            recommended=chosen.replicas,
        )


def _forecast_may_lead_down(ctx: PoolContext, reactive: Decision, predictive: Decision) -> Decision | None:
    """The predictive decision when a usable forecast asks for fewer replicas than reactive while reactive is not
    scaling up: reactive stays the floor on the way up only. Never below what today's demand needs at the
    predictive utilization (the forecast may lead a scale-down, not starve the pool now). None: reactive's floor holds.

    Worked: 20 current, reactive holds 20 (demand 126 at 70 % of 10), the forecast's upper bound 150 at 90 % → 17,
    demand today needs ceil(126 / 9) = 14 → 17.
    """
    if predictive.inputs.get("predictive") == "off" or reactive.replicas > ctx.current_replicas:
        return None
    if predictive.replicas >= reactive.replicas or ctx.demand is None:
        return None
    per_replica = per_replica_target(ctx)
    if per_replica is None:
        return None
    floor = replicas_for(ctx.demand, per_replica)
    return predictive if predictive.replicas >= floor else replace(predictive, replicas=floor)
