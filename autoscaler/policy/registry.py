"""The scaling policies by name: the names are :class:`fleet.pools.Policy` (what a pool's ``policy`` holds), each
mapped here once to its class, which the controller and ``fleetpilot simulate`` make by that name.

- ``static`` (:mod:`autoscaler.policy.static`): a fixed count (``min_replicas`` unless told otherwise).
- ``reactive`` (:mod:`autoscaler.policy.reactive`): the Kubernetes HPA on utilization of per-replica capacity.
- ``predictive`` (:mod:`autoscaler.policy.predictive`): enough replicas for the forecast's adapted bound over the
  time a replica asked for now will serve.
- ``hybrid`` (:mod:`autoscaler.policy.hybrid`): the larger of the two while reactive scales up; otherwise a usable
  forecast asking for fewer may lead the scale-down.

Every policy but ``static`` decides through the safety rails (:mod:`autoscaler.policy.rails`).
"""

from __future__ import annotations

from autoscaler.policy.decision import ScalingPolicy
from autoscaler.policy.hybrid import Hybrid
from autoscaler.policy.predictive import Predictive
from autoscaler.policy.reactive import Reactive
from autoscaler.policy.static import Static
from fleet.pools import Policy

POLICIES: dict[Policy, type[Static] | type[Reactive] | type[Predictive] | type[Hybrid]] = {
    Policy.STATIC: Static,
    Policy.REACTIVE: Reactive,
    Policy.PREDICTIVE: Predictive,
    Policy.HYBRID: Hybrid,
}
# The policies that follow a forecast: their bound's band scale is adapted, and a simulation feeds them one.
FORECAST_POLICIES = frozenset({Policy.PREDICTIVE, Policy.HYBRID})


def make_policy(name: str) -> ScalingPolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[Policy(name)]()
