"""The fake's pods (core ``v1``): each kept as the JSON object the API server would return, read by name, listed
by node (``fieldSelector=spec.nodeName=X``) and watched from a resourceVersion, as the real server answers them."""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, Streamed, forbidden, route

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
    labels: dict[str, str] | None = None,
    host_network: bool = False,
    created: str = "2026-12-04T10:00:00Z",
    host_ip: str = "10.0.0.1",
) -> dict[str, Any]:
    """A Pod as the API server returns it; a ``host_network`` pod's IP is its node's (``host_ip``)."""
    spec: dict[str, Any] = {"nodeName": node_name, "serviceAccountName": service_account}
    if host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
            "resourceVersion": "1",
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": phase, "podIP": host_ip if host_network else pod_ip, "hostIP": host_ip},
    }


@dataclass
class PodEvents:
    """The pods' change log: each change takes the next resourceVersion; a watch is sent the changes after its own.

    ``compact()`` forgets the log (older versions then answer 410, as after etcd's compaction); ``drop_watches()``
    ends every open watch stream, as an API server restart does."""

    version: int = 1
    first_kept: int = 1  # a watch from a version before this is answered 410 Gone
    log: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    epoch: int = 0  # bumped by drop_watches and close: a stream of an older epoch ends
    closed: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def record(self, kind: str, pod: dict[str, Any]) -> None:
        """``kind`` (ADDED, MODIFIED, DELETED) of ``pod``, which takes the new resourceVersion."""
        with self.changed:
            self.version += 1
            pod["metadata"]["resourceVersion"] = str(self.version)
            self.log.append((self.version, kind, copy.deepcopy(pod)))
            self.changed.notify_all()

    def compact(self) -> None:
        with self.changed:
            self.log.clear()
            self.first_kept = self.version + 1

    def drop_watches(self) -> None:
        with self.changed:
            self.epoch += 1
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.drop_watches()

    def stream(self, node: str | None, after: int, timeout_s: float) -> Iterator[dict[str, Any]]:
        """The watch events on ``node`` after version ``after``, as they come, for ``timeout_s`` at most."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            epoch = self.epoch
        while True:
            with self.changed:
                pending = [entry for entry in self.log if entry[0] > after]
                if not pending:
                    left = deadline - time.monotonic()
                    if self.epoch != epoch or left <= 0:
                        return
                    self.changed.wait(min(left, 0.5))
                    continue
            for version, kind, pod in pending:
                after = version
                if node is None or pod["spec"].get("nodeName") == node:
                    yield {"type": kind, "object": pod}


def _node_selector(query: dict[str, str]) -> str | None:
    """The node of ``fieldSelector=spec.nodeName=X``; 400 for a selector this fake does not support, worded as the
    real server words a field it cannot select pods by."""
    selector = query.get("fieldSelector")
    if not selector:
        return None
    name, _, value = selector.replace("==", "=").partition("=")
    if name != "spec.nodeName" or "," in value:
        raise ApiError(400, "BadRequest", f"field label not supported: {name}")
    return value


@route("GET", r"^/api/v1/pods$")
def list_pods(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    """List, or with ``watch=1`` stream the changes after ``resourceVersion`` (an ERROR event with a 410 Status when
    it is older than the log keeps: the real server answers 200 and then that event)."""
    forbidden(kube, "watch" if request.query.get("watch") in ("1", "true") else "list", "pods", "", "")
    node = _node_selector(request.query)
    events = kube.pod_events
    if request.query.get("watch") in ("1", "true"):
        raw = request.query.get("resourceVersion", "")
        if not raw.isdigit():
            raise ApiError(400, "BadRequest", f"resourceVersion: Invalid value: {raw!r}: must be a number")
        if int(raw) < events.first_kept - 1:
            message = f"too old resource version: {raw} ({events.first_kept - 1})"
            gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "message": message}
            raise Streamed(iter([{"type": "ERROR", "object": {**gone, "metadata": {}, "code": 410}}]))
        raise Streamed(events.stream(node, int(raw), float(request.query.get("timeoutSeconds", "1800"))))
    items = [copy.deepcopy(p) for p in kube.pods.values() if node is None or p["spec"].get("nodeName") == node]
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(events.version)}, "items": items}


@route("GET", r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
def read_pod(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    forbidden(kube, "get", "pods", "", match["ns"], f' "{match["name"]}"')
    pod = kube.pods.get((match["ns"], match["name"]))
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{match["name"]}" not found')
    return pod


ROUTES: list[Route] = [list_pods, read_pod]
