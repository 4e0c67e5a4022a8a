"""Who else scales a workload: the HorizontalPodAutoscalers and KEDA ScaledObjects whose target it is.

Pure: it reads the objects as the API server lists them (``autoscaling/v2`` HPAs, ``keda.sh/v1alpha1``
ScaledObjects) and says which one owns a :class:`ScaleTarget`. Two controllers writing one ``spec.replicas`` undo each
other, so the kubernetes actuator never patches an owned target. KEDA scales through an HPA of its own
(``keda-hpa-<name>``) on the same target, so a ScaledObject is looked for first: the HPA is KEDA's, not a rival.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.scale_targets import ScaleTarget

# KEDA's defaults for a ScaledObject's scaleTargetRef (keda.sh/v1alpha1 ScaleTarget: apiVersion, kind optional)
KEDA_DEFAULT_API_VERSION = "apps/v1"
KEDA_DEFAULT_KIND = "Deployment"
# KEDA triggers served by an external scaler over gRPC (fleetpilot's is one): polled, or pushed (StreamIsActive)
EXTERNAL_TRIGGERS = frozenset({"external", "external-push"})


@dataclass(frozen=True)
class ScaleOwner:
    """An HPA or ScaledObject and the target its ``scaleTargetRef`` names (API group, kind, name)."""

    kind: str  # HorizontalPodAutoscaler | ScaledObject
    namespace: str
    name: str
    target_group: str
    target_kind: str
    target_name: str
    external_pools: frozenset[str] = frozenset()  # the ``pool`` of each external trigger (fleetpilot's scaler)

    def owns(self, target: ScaleTarget) -> bool:
        return (self.target_group, self.target_kind, self.target_name) == (target.group, target.kind, target.name)

    def acts_for(self, pool: str) -> bool:
        """Whether one of its triggers is fleetpilot's external scaler asking for ``pool``'s replicas."""
        return pool in self.external_pools

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _group(api_version: str | None) -> str:
    """``apps/v1`` → ``apps``; ``v1`` (the core API) or none → ``""``."""
    return api_version.split("/")[0] if api_version and "/" in api_version else ""


def hpa_owners(items: Iterable[Mapping[str, Any]]) -> list[ScaleOwner]:
    """The HPAs of one namespace's list, each with its scale target."""
    owners = []
    for hpa in items:
        ref = hpa.get("spec", {}).get("scaleTargetRef", {})
        meta = hpa.get("metadata", {})
        owners.append(
            ScaleOwner(
                "HorizontalPodAutoscaler",
                meta.get("namespace", ""),
                meta.get("name", ""),
                _group(ref.get("apiVersion")),
                ref.get("kind", ""),
                ref.get("name", ""),
            )
        )
    return owners


def scaled_object_owners(items: Iterable[Mapping[str, Any]]) -> list[ScaleOwner]:
    """The ScaledObjects of one namespace's list, each with its target (KEDA's defaults filled in) and the pools its
    external triggers ask fleetpilot for (``type: external`` or ``external-push``, ``metadata.pool``)."""
    owners = []
    for scaled in items:
        spec = scaled.get("spec", {})
        ref = spec.get("scaleTargetRef", {})
        meta = scaled.get("metadata", {})
        pools = frozenset(
            str(trigger.get("metadata", {}).get("pool"))
            for trigger in spec.get("triggers", [])
            if trigger.get("type") in EXTERNAL_TRIGGERS and trigger.get("metadata", {}).get("pool")
        )
        owners.append(
            ScaleOwner(
                "ScaledObject",
                meta.get("namespace", ""),
                meta.get("name", ""),
                _group(ref.get("apiVersion") or KEDA_DEFAULT_API_VERSION),
                ref.get("kind") or KEDA_DEFAULT_KIND,
                ref.get("name", ""),
                pools,
            )
        )
    return owners


def owner_of(target: ScaleTarget, owners: Sequence[ScaleOwner]) -> ScaleOwner | None:
    """The owner of ``target``: a ScaledObject before an HPA (KEDA's own HPA names the same target)."""
    matching = [owner for owner in owners if owner.owns(target)]
    matching.sort(key=lambda owner: owner.kind != "ScaledObject")
    return matching[0] if matching else None
