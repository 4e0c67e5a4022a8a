"""Follows this node's pods: list, then watch from the list's resourceVersion; list again after a 410 or a dropped
stream, backing off 1, 2, 4 … 30 s while the API server refuses or cannot be reached.

After each change the engines the pods in its scope run (``pod_scope``, ``annotations.engine_of``) go to
``on_change``; a pod outside the scope or wrongly annotated is skipped with one log line per distinct problem, not one
per event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from inference_agent.kube.annotations import BadAnnotation, PodEngine, claims_a_pool, engine_of, pod_key
from inference_agent.kube.api_client import Gone, KubeApi, KubeApiError
from inference_agent.kube.pod_scope import PodScope

log = logging.getLogger(__name__)
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


def engines_of(pods: Mapping[str, dict[str, Any]], scope: PodScope) -> tuple[dict[str, PodEngine], dict[str, str]]:
    """The engines of the ``pods`` (by ``namespace/name``) in ``scope`` and, for each annotated pod refused, why."""
    engines: dict[str, PodEngine] = {}
    refused: dict[str, str] = {}
    for key, pod in sorted(pods.items()):
        outside = scope.refusal(pod) if claims_a_pool(pod) else None
        if outside is not None:
            refused[key] = f"pod {key}: {outside}"
            continue
        try:
            engine = engine_of(pod)
        except BadAnnotation as exc:
            refused[key] = str(exc)
            continue
        if engine is not None:
            engines[key] = engine
    return engines, refused


def next_backoff(previous_s: float | None) -> float:
    """1 s after the first failure, then doubling up to 30 s: 1, 2, 4, 8, 16, 30, 30 …"""
    return BACKOFF_FIRST_S if previous_s is None else min(previous_s * 2, BACKOFF_MAX_S)


class PodWatch:
    """Runs the list-and-watch loop of ``node``'s pods on its own thread until ``close()``; only the pods in
    ``scope`` are read."""

    def __init__(
        self, api: KubeApi, node: str, on_change: Callable[[dict[str, PodEngine]], None], *, scope: PodScope
    ) -> None:
        self._api = api
        self._node = node
        self._scope = scope
        self._on_change = on_change
        self._pods: dict[str, dict[str, Any]] = {}
        self._engines: dict[str, PodEngine] | None = None
        self._logged: dict[str, str] = {}  # pod → the refusal last logged for it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        backoff_s: float | None = None
        while not self._stop.is_set():
            try:
                version = self._list()
                backoff_s = None
                while not self._stop.is_set():
                    version = self._watch(version)
            except Gone as exc:
                log.info("pods of node %s: %s; listing again", self._node, exc)
                continue
            except KubeApiError as exc:
                if self._stop.is_set():
                    return  # close() ended the stream
                backoff_s = next_backoff(backoff_s)
                log.warning("pods of node %s: %s; listing again in %.0f s", self._node, exc, backoff_s)
                self._stop.wait(backoff_s)

    def _list(self) -> str:
        items, version = self._api.list_pods(self._node)
        self._pods = {pod_key(pod): pod for pod in items}
        self._changed()
        return version

    def _watch(self, version: str) -> str:
        """Apply one watch stream's events; the resourceVersion to resume from when the server ends it."""
        for event in self._api.watch_pods(self._node, version):
            if self._stop.is_set():
                break
            version = event.resource_version or version
            if event.type == "BOOKMARK":
                continue
            key = pod_key(event.object)
            if event.type == "DELETED":
                self._pods.pop(key, None)
            else:
                self._pods[key] = event.object
            self._changed()
        return version

    def _changed(self) -> None:
        engines, refused = engines_of(self._pods, self._scope)
        for key, why in refused.items():
            if self._logged.get(key) != why:
                log.warning("%s; the pod is not read", why)
        self._logged = refused
        if engines != self._engines:
            self._engines = engines
            self._on_change(dict(engines))

    def close(self) -> None:
        self._stop.set()
        self._api.close()  # ends a watch blocked on the stream
        self._thread.join(timeout=5)
