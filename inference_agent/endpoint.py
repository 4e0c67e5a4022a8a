"""The agent's own HTTP endpoint: ``/metrics`` (its health in Prometheus form) and ``/healthz``.

The standard library's threading server keeps ``fleetpilot[agent]`` free of web-framework dependencies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class AgentEndpoint:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, health: Callable[[], dict[str, Any]]) -> None:
        handler = _handler(registry, health)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-endpoint", daemon=True)

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: CollectorRegistry, health: Callable[[], dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path.split("?")[0] == "/healthz":
                state = health()
                code = 200 if state.get("status") == "ok" else 503
                self._answer(code, json.dumps(state).encode(), "application/json")
            else:
                self._answer(404, b'{"detail": "not found: try /metrics or /healthz"}', "application/json")

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every few seconds would flood the log

    return Handler
