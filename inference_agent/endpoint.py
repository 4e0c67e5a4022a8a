"""The agent's own HTTP endpoint: ``/metrics`` (its health in Prometheus form) and ``/healthz`` (200 while the
health says ``ok``; 503 with the state, and its ``reason``, while the agent stops or its pusher is stopped or stale).

``/healthz`` is the DaemonSet's liveness probe: ``PROBE_SLOTS`` connections are kept for the address the endpoint
listens on, where the kubelet's probe comes from (hostNetwork), so remote clients holding every other slot cannot
make the kubelet restart the agent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from inference_agent.http_server import ConnectionLimits, JsonHandler, Server

PROBE_SLOTS = 4  # the kubelet probes every 20 s, one connection at a time: 4 leave room for an operator's curl too


class AgentEndpoint:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        health: Callable[[], dict[str, Any]],
        *,
        limits: ConnectionLimits,
    ) -> None:
        limits = replace(limits, reserved_local=PROBE_SLOTS)
        self._server = Server(host, port, _handler(registry, health), "agent-endpoint", limits=limits)

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._server.start()

    def close(self) -> None:
        self._server.close()


def _handler(registry: CollectorRegistry, health: Callable[[], dict[str, Any]]) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def on_get(self, path: str) -> None:
            if path == "/metrics":
                self.answer_bytes(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                state = health()
                self.answer_json(200 if state.get("status") == "ok" else 503, state)
            else:
                self.answer_json(404, {"detail": f"not found: {path}; try /metrics or /healthz"})

    return Handler
