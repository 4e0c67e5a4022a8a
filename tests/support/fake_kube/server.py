"""The fake API server itself: state, authentication, dispatch over the resource modules' routes, HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from kubernetes import client

from inference_agent.http_server import ClientGone, JsonHandler, Server
from tests.support.fake_kube import autoscalers, discovery, pods, scale, tokenreview
from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, Streamed
from tests.support.fake_kube.autoscalers import hpa_object, scaled_object
from tests.support.fake_kube.discovery import BUILTIN_KINDS, FakeKind
from tests.support.fake_kube.pods import PodEvents, pod_object
from tests.support.fake_kube.scale import FakeWorkload
from tests.support.fake_kube.tokenreview import IssuedToken, ReviewGate

ROUTES: list[Route] = [*discovery.ROUTES, *scale.ROUTES, *autoscalers.ROUTES, *pods.ROUTES, *tokenreview.ROUTES]


@dataclass
class FakeKube:
    """``with FakeKube() as kube:`` serves at ``kube.url``; ``kube.api_client()`` is a client that carries the token."""

    token: str = "fake-service-account-token"
    kinds: list[FakeKind] = field(default_factory=lambda: list(BUILTIN_KINDS))  # what discovery lists
    # (apiVersion, kind, namespace, name) -> a workload whose scale subresource the fake serves
    workloads: dict[tuple[str, str, str, str], FakeWorkload] = field(default_factory=dict)
    hpas: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    scaled_objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # namespace -> KEDA ScaledObjects
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (namespace, name) -> Pod object
    pod_events: PodEvents = field(default_factory=PodEvents)  # their changes, for watches
    # tokens issued by tokenreview.issue_token, judged by its TokenReview against this clock; False: a server older
    # than Kubernetes 1.30, whose reviews name the pod but not the node
    service_account_tokens: dict[str, IssuedToken] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    node_name_claims: bool = True
    review_audiences: bool = True  # False: reviews answer no status.audiences (an authenticator ignoring them)
    review_gate: ReviewGate | None = None  # set: reviews wait for it to open (a slow API server), outside the lock
    forbidden: set[str] = field(default_factory=set)  # verbs answered 403: "get", "patch", "list"
    forbidden_namespaces: set[str] = field(default_factory=set)  # every verb in them answered 403
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: Server | None = None

    def add_deployment(self, namespace: str, name: str, replicas: int, *, observed: bool = True) -> None:
        self.add_workload("apps/v1", "Deployment", namespace, name, replicas, observed=observed)

    def add_workload(
        self, api_version: str, kind: str, namespace: str, name: str, replicas: int, *, observed: bool = True
    ) -> FakeWorkload:
        """A workload of a kind in ``kinds`` (its scale subresource serves it), at ``replicas``."""
        workload = FakeWorkload(replicas, replicas if observed else None)
        self.workloads[(api_version, kind, namespace, name)] = workload
        return workload

    @property
    def deployments(self) -> dict[tuple[str, str], FakeWorkload]:
        """The ``apps/v1`` Deployments by (namespace, name)."""
        found = self.workloads.items()
        return {(ns, name): w for (av, kind, ns, name), w in found if (av, kind) == ("apps/v1", "Deployment")}

    def kind_of(self, group: str, version: str, plural: str) -> FakeKind | None:
        return next((k for k in self.kinds if (k.group, k.version, k.plural) == (group, version, plural)), None)

    def add_hpa(
        self, namespace: str, name: str, deployment: str, *, kind: str = "Deployment", api_version: str = "apps/v1"
    ) -> None:
        """An HPA in ``namespace`` whose scale target is ``api_version`` ``kind``/``deployment``."""
        self.hpas.setdefault(namespace, []).append(hpa_object(namespace, name, deployment, kind, api_version))

    def add_scaled_object(self, namespace: str, name: str, target: str, **fields: Any) -> None:
        """A KEDA ScaledObject in ``namespace`` (``fields``: see ``autoscalers.scaled_object``)."""
        self.scaled_objects.setdefault(namespace, []).append(scaled_object(namespace, name, target, **fields))

    def add_pod(self, namespace: str, name: str, node_name: str, **fields: Any) -> dict[str, Any]:
        """A pod on ``node_name`` (``fields``: see ``pods.pod_object``), or its new state; watches see it."""
        with self._lock:
            kind = "MODIFIED" if (namespace, name) in self.pods else "ADDED"
            pod = self.pods[(namespace, name)] = pod_object(namespace, name, node_name, **fields)
            self.pod_events.record(kind, pod)
        return pod

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self.pod_events.record("DELETED", self.pods.pop((namespace, name)))

    def sent(self, method: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.method == method]

    @property
    def url(self) -> str:
        assert self._server is not None, "start the fake first (with FakeKube() as kube:)"
        return f"http://127.0.0.1:{self._server.port}"

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig at ``path`` naming this fake and its token, as kubectl and the client's loader read one."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fleetpilot", "user": {"token": self.token}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fleetpilot"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

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
        self.pod_events.close()
        self._server.close()

    def answer(self, request: RecordedRequest) -> dict[str, Any]:
        """The JSON answer to ``request``; raises ApiError for an error answer."""
        gate = self.review_gate if request.path.endswith("/tokenreviews") else None
        with gate.held() if gate is not None else nullcontext(), self._lock:
            self.requests.append(request)
            if request.headers.get("authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            matched = False
            for candidate in ROUTES:
                if match := candidate.pattern.match(request.path):
                    matched = True
                    if request.method in candidate.methods:
                        return candidate.handle(self, request, match)
            if matched:
                raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {request.path}")
            raise ApiError(404, "NotFound", "the server could not find the requested resource")


def _handler_for(kube: FakeKube) -> type[JsonHandler]:
    class FakeKubeHandler(JsonHandler):
        def on_get(self, path: str) -> None:
            self._serve("GET", b"")

        def on_post(self, path: str, body: bytes) -> None:
            self._serve("POST", body)

        def do_PATCH(self) -> None:  # noqa: N802 (http.server dispatches on this name)
            body = self.read_body()
            if body is not None:
                self._serve("PATCH", body)

        def _serve(self, method: str, body: bytes) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            parts = urlsplit(self.path)
            request = RecordedRequest(method, parts.path, headers, body, dict(parse_qsl(parts.query)))
            try:
                self.answer_json(200, kube.answer(request))
            except Streamed as streamed:
                self._stream(streamed.events)
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

        def _stream(self, events: Iterator[dict[str, Any]]) -> None:
            self.start_stream(200, "application/json")
            try:
                for event in events:
                    self.write_chunk(json.dumps(event).encode() + b"\n")
            except ClientGone:
                return
            self.end_stream()

    return FakeKubeHandler
