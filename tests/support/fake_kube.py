"""A fake Kubernetes API server on loopback, for the kubernetes actuator's tests (no cluster runs here).

It serves just what the actuator uses: a Deployment's ``scale`` subresource (GET, PATCH) and the namespace's
``autoscaling/v2`` HorizontalPodAutoscaler list, with ``Status`` objects for errors as the real server sends them:
401 without the bearer token, 404 for an unknown Deployment, 403 for the verbs in ``forbidden`` (a Role that lacks
them). A real ``kubernetes.client.ApiClient`` talks to it over HTTP; every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kubernetes import client

from inference_agent.http_server import JsonHandler, Server

SCALE_PATH = re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments/(?P<name>[^/]+)/scale$")
HPA_LIST_PATH = re.compile(r"^/apis/autoscaling/v2/namespaces/(?P<ns>[^/]+)/horizontalpodautoscalers$")
OBJECT_PATCHES = {"application/merge-patch+json", "application/strategic-merge-patch+json"}
JSON_PATCH = "application/json-patch+json"


@dataclass
class FakeDeployment:
    """``status_replicas`` None: a Deployment the controller has not observed yet (its Scale has no status)."""

    spec_replicas: int
    status_replicas: int | None


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class ApiError(Exception):
    """An error answer: the HTTP code, the Status reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


@dataclass
class FakeKube:
    """``with FakeKube() as kube:`` serves at ``kube.url``; ``kube.api_client()`` is a client that carries the token."""

    token: str = "fake-service-account-token"
    deployments: dict[tuple[str, str], FakeDeployment] = field(default_factory=dict)
    hpas: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    forbidden: set[str] = field(default_factory=set)  # verbs answered 403: "get", "patch", "list"
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: Server | None = None

    def add_deployment(self, namespace: str, name: str, replicas: int, *, observed: bool = True) -> None:
        self.deployments[(namespace, name)] = FakeDeployment(replicas, replicas if observed else None)

    def add_hpa(self, namespace: str, name: str, deployment: str, *, kind: str = "Deployment") -> None:
        """An HPA in ``namespace`` whose scale target is ``kind``/``deployment``."""
        self.hpas.setdefault(namespace, []).append(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": deployment},
                    "minReplicas": 1,
                    "maxReplicas": 10,
                },
            }
        )

    def sent(self, method: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.method == method]

    @property
    def url(self) -> str:
        assert self._server is not None, "start the fake first (with FakeKube() as kube:)"
        return f"http://127.0.0.1:{self._server.port}"

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration(
            host=self.url, api_key={"authorization": self.token}, api_key_prefix={"authorization": "Bearer"}
        )
        configuration.retries = 0  # an error answer is the test's subject, not something to retry
        return client.ApiClient(configuration)

    def __enter__(self) -> FakeKube:
        self._server = Server("127.0.0.1", 0, _handler_for(self), name="fake-kube", poll_interval_s=0.05)
        self._server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()

    def answer(self, request: RecordedRequest) -> dict[str, Any]:
        """The JSON answer to ``request``; raises ApiError for an error answer."""
        with self._lock:
            self.requests.append(request)
            if request.headers.get("authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if match := SCALE_PATH.match(request.path):
                return self._scale(request, match["ns"], match["name"])
            if (match := HPA_LIST_PATH.match(request.path)) and request.method == "GET":
                self._authorize("list", "horizontalpodautoscalers", "autoscaling", match["ns"], "")
                items = self.hpas.get(match["ns"], [])
                return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList", "items": items}
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _scale(self, request: RecordedRequest, namespace: str, name: str) -> dict[str, Any]:
        verb = {"GET": "get", "PATCH": "patch"}.get(request.method)
        if verb is None:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on deployments/scale")
        self._authorize(verb, "deployments/scale", "apps", namespace, f' "{name}"')
        deployment = self.deployments.get((namespace, name))
        if deployment is None:
            raise ApiError(404, "NotFound", f'deployments.apps "{name}" not found')
        if verb == "patch":
            replicas = _patched_replicas(request)
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

    def _authorize(self, verb: str, resource: str, group: str, namespace: str, named: str) -> None:
        """403 for a verb in ``forbidden``, worded as the API server words an RBAC refusal."""
        if verb not in self.forbidden:
            return
        user = f"system:serviceaccount:{namespace}:fleetpilot"
        kind = resource.split("/", maxsplit=1)[0]
        raise ApiError(
            403,
            "Forbidden",
            f'{kind}.{group}{named} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
            f'in API group "{group}" in the namespace "{namespace}"',
        )


def _patched_replicas(request: RecordedRequest) -> int:
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


def _handler_for(kube: FakeKube) -> type[JsonHandler]:
    class FakeKubeHandler(JsonHandler):
        def on_get(self, path: str) -> None:
            self._serve("GET", b"")

        def do_PATCH(self) -> None:  # noqa: N802 (http.server dispatches on this name)
            body = self.read_body()
            if body is not None:
                self._serve("PATCH", body)

        def _serve(self, method: str, body: bytes) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            request = RecordedRequest(method, self.path.split("?")[0], headers, body)
            try:
                self.answer_json(200, kube.answer(request))
            except ApiError as error:
                status = {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "metadata": {},
                    "status": "Failure",
                    "message": error.message,
                    "reason": error.reason,
                    "code": error.code,
                }
                self.answer_json(error.code, status)

    return FakeKubeHandler
