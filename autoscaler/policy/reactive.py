"""The ``reactive`` policy: the Kubernetes HPA (:mod:`autoscaler.hpa`) on utilization of per-replica capacity:
demand over the replicas asked for × capacity against ``target_utilization``, with HPA's tolerance."""

from __future__ import annotations

from autoscaler.hpa import external_desired_replicas
from autoscaler.policy.decision import Decision, PoolContext, hold
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Policy


class Reactive:
    """HPA on utilization of per-replica capacity: ceil(demand / (target × capacity)) outside the tolerance."""

    name = Policy.REACTIVE

    def decide(self, ctx: PoolContext) -> Decision:
        s = ctx.settings
        if ctx.per_replica_capacity is None:
            return hold(
                ctx,
                self.name,
                "reactive: no per-replica capacity measured or configured; holding",
                ReasonCode.NO_CAPACITY,
            )
        if ctx.demand is None:
            return hold(ctx, self.name, "reactive: no demand sample; holding", ReasonCode.STALE_METRICS)
        target = s.target_utilization * ctx.per_replica_capacity
        # As HPA's per-pod external metric: the demand spread over every replica asked for (ready or starting).
        base = max(ctx.current_replicas, 1)
        wanted = external_desired_replicas(
            base, ctx.ready_replicas, ctx.demand, target, per_replica=True, tolerance=s.tolerance
        )
        utilization = ctx.demand / (base * ctx.per_replica_capacity)
        return Decision(
            wanted,
            self.name,
            f"reactive: utilization {utilization:.2f} of {base} replicas against target "
            f"{s.target_utilization:.2f} → {wanted}",
            {
                "demand": ctx.demand,
                "utilization": round(utilization, 4),
                "target_utilization": s.target_utilization,
            },
            code=ReasonCode.WITHIN_TOLERANCE if wanted == ctx.current_replicas else ReasonCode.REACTIVE_UTILIZATION,
            recommended=wanted,
        )
