"""The fake's scalable workloads: the ``scale`` subresource (GET, PATCH) of any kind that has one.

A workload is kept by ``(apiVersion, kind, namespace, name)``; its kind must be one the fake serves
(``FakeKube.kinds``, :mod:`discovery`) with a ``scale`` subresource, or the path is unknown (404), as on a real server.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, forbidden, route

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube

OBJECT_PATCHES = {"application/merge-patch+json", "application/strategic-merge-patch+json"}
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
UNKNOWN_PATH = "the server could not find the requested resource"


@dataclass
class FakeWorkload:
    """``status_replicas`` None: a workload its controller has not observed yet (its Scale has no status)."""

    spec_replicas: int
    status_replicas: int | None


@route(
    "GET PATCH",
    r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)/(?P<name>[^/]+)/scale$",
)
def workload_scale(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    group, namespace, name, plural = match["group"] or "", match["ns"], match["name"], match["plural"]
    kind = kube.kind_of(group, match["version"], plural)
    if kind is None or "scale" not in kind.subresources:
        raise ApiError(404, "NotFound", UNKNOWN_PATH)
    verb = {"GET": "get", "PATCH": "patch"}[request.method]
    forbidden(kube, verb, f"{plural}/scale", group, namespace, f' "{name}"')
    workload = kube.workloads.get((kind.api_version, kind.kind, namespace, name))
    if workload is None:
        raise ApiError(404, "NotFound", f'{kind.resource} "{name}" not found')
    if verb == "patch":
        replicas = patched_replicas(request, custom=kind.custom)
        workload.spec_replicas = replicas
        if workload.status_replicas is not None:
            workload.status_replicas = replicas  # the fake's workload controller converges at once
    scale: dict[str, Any] = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": workload.spec_replicas},
    }
    if workload.status_replicas is not None:
        scale["status"] = {"replicas": workload.status_replicas, "selector": f"app={name}"}
    return scale


def patched_replicas(request: RecordedRequest, *, custom: bool = False) -> int:
    """``spec.replicas`` from a merge or strategic-merge patch object, or a JSON patch's replace/add of it. A custom
    resource takes no strategic merge (the real server answers 415 for one)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    body = json.loads(request.body or b"null")
    replicas: object = None
    if custom and content_type == STRATEGIC_MERGE:
        raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")
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


ROUTES: list[Route] = [workload_scale]
