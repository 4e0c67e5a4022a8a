"""The fake's pods (core ``v1``): each kept as the JSON object the API server would return, read by name."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, forbidden, route

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube


def pod_object(
    namespace: str,
    name: str,
    node_name: str,
    *,
    annotations: dict[str, str] | None = None,
    service_account: str = "default",
    pod_ip: str = "127.0.0.1",
    uid: str | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "annotations": dict(annotations or {}),
            "resourceVersion": "1",
        },
        "spec": {"nodeName": node_name, "serviceAccountName": service_account},
        "status": {"phase": phase, "podIP": pod_ip},
    }


@route("GET", r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
def read_pod(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    forbidden(kube, "get", "pods", "", match["ns"], f' "{match["name"]}"')
    pod = kube.pods.get((match["ns"], match["name"]))
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{match["name"]}" not found')
    return pod


ROUTES: list[Route] = [read_pod]
