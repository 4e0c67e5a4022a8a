"""The fake's autoscalers of workloads: a namespace's ``autoscaling/v2`` HPA list and KEDA ``ScaledObject`` list
(the latter only while ``keda.sh`` is one of ``FakeKube.kinds``, as when KEDA's CRDs are installed)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, forbidden, route

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube


def hpa_object(namespace: str, name: str, target: str, kind: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
            "minReplicas": 1,
            "maxReplicas": 10,
        },
    }


def scaled_object(
    namespace: str,
    name: str,
    target: str,
    *,
    triggers: list[dict[str, Any]],
    kind: str | None = None,
    api_version: str | None = None,
) -> dict[str, Any]:
    """A ScaledObject as KEDA's CRD defines it: ``scaleTargetRef`` (``apiVersion``, ``kind`` optional) and
    ``triggers`` (``type``, ``metadata``); ``kind``/``api_version`` None leave them out (KEDA: apps/v1 Deployment)."""
    ref: dict[str, Any] = {"name": target}
    if api_version is not None:
        ref["apiVersion"] = api_version
    if kind is not None:
        ref["kind"] = kind
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scaleTargetRef": ref, "triggers": triggers},
    }


@route("GET", r"^/apis/autoscaling/v2/namespaces/(?P<ns>[^/]+)/horizontalpodautoscalers$")
def hpa_list(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    forbidden(kube, "list", "horizontalpodautoscalers", "autoscaling", match["ns"])
    items = kube.hpas.get(match["ns"], [])
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList", "items": items}


@route("GET", r"^/apis/keda.sh/v1alpha1/namespaces/(?P<ns>[^/]+)/scaledobjects$")
def scaled_object_list(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    if kube.kind_of("keda.sh", "v1alpha1", "scaledobjects") is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    forbidden(kube, "list", "scaledobjects", "keda.sh", match["ns"])
    items = kube.scaled_objects.get(match["ns"], [])
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObjectList", "items": items}


ROUTES: list[Route] = [hpa_list, scaled_object_list]
