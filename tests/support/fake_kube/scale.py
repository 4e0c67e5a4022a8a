"""The fake's Deployments: the ``scale`` subresource (GET, PATCH) and the namespace's ``autoscaling/v2`` HPA list."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, forbidden, route

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube

OBJECT_PATCHES = {"application/merge-patch+json", "application/strategic-merge-patch+json"}
JSON_PATCH = "application/json-patch+json"


@dataclass
class FakeDeployment:
    """``status_replicas`` None: a Deployment the controller has not observed yet (its Scale has no status)."""

    spec_replicas: int
    status_replicas: int | None


def hpa_object(namespace: str, name: str, target: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
            "minReplicas": 1,
            "maxReplicas": 10,
        },
    }


@route("GET PATCH", r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments/(?P<name>[^/]+)/scale$")
def deployment_scale(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    namespace, name = match["ns"], match["name"]
    verb = {"GET": "get", "PATCH": "patch"}[request.method]
    forbidden(kube, verb, "deployments/scale", "apps", namespace, f' "{name}"')
    deployment = kube.deployments.get((namespace, name))
    if deployment is None:
        raise ApiError(404, "NotFound", f'deployments.apps "{name}" not found')
    if verb == "patch":
        replicas = patched_replicas(request)
        deployment.spec_replicas = replicas
        if deployment.status_replicas is not None:
            deployment.status_replicas = replicas  # the fake's deployment controller converges at once
    scale: dict[str, Any] = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": deployment.spec_replicas},
    }
    if deployment.status_replicas is not None:
        scale["status"] = {"replicas": deployment.status_replicas, "selector": f"app={name}"}
    return scale


@route("GET", r"^/apis/autoscaling/v2/namespaces/(?P<ns>[^/]+)/horizontalpodautoscalers$")
def hpa_list(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    forbidden(kube, "list", "horizontalpodautoscalers", "autoscaling", match["ns"])
    items = kube.hpas.get(match["ns"], [])
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList", "items": items}


def patched_replicas(request: RecordedRequest) -> int:
    """``spec.replicas`` from a merge or strategic-merge patch object, or a JSON patch's replace/add of it."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    body = json.loads(request.body or b"null")
    replicas: object = None
    if content_type in OBJECT_PATCHES and isinstance(body, dict):
        replicas = body.get("spec", {}).get("replicas")
    elif content_type == JSON_PATCH and isinstance(body, list):
        for op in body:
            if op.get("op") in {"add", "replace"} and op.get("path") == "/spec/replicas":
                replicas = op.get("value")
    else:
        raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")
    if not isinstance(replicas, int) or replicas < 0:
        raise ApiError(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}: must be a non-negative integer")
    return replicas


ROUTES: list[Route] = [deployment_scale, hpa_list]
