"""The ``static`` policy: a fixed count, ``static_replicas`` when set, else the pool's ``min_replicas``; no rail
applies to it (:func:`autoscaler.policy.rails.guarded`)."""

from __future__ import annotations

from autoscaler.policy.decision import Decision, PoolContext
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Policy


class Static:
    name = Policy.STATIC

    def decide(self, ctx: PoolContext) -> Decision:
        wanted = ctx.settings.static_replicas if ctx.settings.static_replicas is not None else ctx.min_replicas
        replicas = min(max(wanted, ctx.min_replicas), ctx.max_replicas)
        return Decision(
            replicas, self.name, f"static: {replicas} replicas", code=ReasonCode.STATIC_COUNT, recommended=replicas
        )
