"""The fake's API discovery: ``/version``, ``/api``, ``/apis`` and each group version's APIResourceList.

Answered from ``FakeKube.kinds`` the way the real server words them — a subresource such as ``deployments/scale``
is an entry of its own (kind ``Scale`` in ``autoscaling/v1``) — since the dynamic client resolves a kind to its
resource, and learns whether it has a scale subresource, from these lists alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, route

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube

SUBRESOURCE_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class FakeKind:
    """A kind the fake serves: its group (``""``: core), version, plural resource name and subresources."""

    group: str
    version: str
    kind: str
    plural: str
    subresources: tuple[str, ...] = ()
    custom: bool = False  # a CustomResourceDefinition's kind (no strategic merge patch)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """How a Status message names the resource: ``deployments.apps``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def entries(self) -> list[dict[str, Any]]:
        """Its APIResource entries: the resource, then one per subresource."""
        entries: list[dict[str, Any]] = [
            {
                "name": self.plural,
                "singularName": self.kind.lower(),
                "namespaced": True,
                "kind": self.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
        ]
        for sub in self.subresources:
            kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"} if sub == "scale" else {"kind": self.kind}
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": True,
                    **kind,
                    "verbs": SUBRESOURCE_VERBS,
                }
            )
        return entries


BUILTIN_KINDS = (
    FakeKind("", "v1", "Pod", "pods", ("status",)),
    FakeKind("", "v1", "ReplicationController", "replicationcontrollers", ("scale", "status")),
    FakeKind("apps", "v1", "Deployment", "deployments", ("scale", "status")),
    FakeKind("apps", "v1", "StatefulSet", "statefulsets", ("scale", "status")),
    FakeKind("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", ("status",)),
)
# CRDs a test installs with FakeKube.kinds.append: KEDA's ScaledObject, LeaderWorkerSet (with a scale subresource)
SCALED_OBJECT = FakeKind("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects", ("status",), custom=True)
LEADER_WORKER_SET = FakeKind(
    "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", ("scale", "status"), custom=True
)


@route("GET", r"^/version$")
def version(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    return {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}


@route("GET", r"^/api$")
def core_versions(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}


@route("GET", r"^/apis$")
def groups(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    versions: dict[str, list[str]] = {}
    for kind in kube.kinds:
        if kind.group and kind.version not in versions.setdefault(kind.group, []):
            versions[kind.group].append(kind.version)
    listed = []
    for group, names in versions.items():
        entries = [{"groupVersion": f"{group}/{name}", "version": name} for name in names]
        listed.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}


@route("GET", r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)$")
def resources(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    group, version = match["group"] or "", match["version"]
    served = [kind for kind in kube.kinds if (kind.group, kind.version) == (group, version)]
    if not served:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": served[0].api_version,
        "resources": [entry for kind in served for entry in kind.entries()],
    }


ROUTES: list[Route] = [version, core_versions, groups, resources]
