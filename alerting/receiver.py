"""A webhook receiver on loopback, as a team would write one: it checks each notification's signature and records
it with its arrival time. Used by the tests and ``bench.alerting``; also handy to try a webhook by hand.

``fail_first`` answers the first N requests with 500 (a receiver that is briefly down); ``status`` a fixed answer.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from alerting.payload import DELIVERY_HEADER, SIGNATURE_HEADER, verify

# A server delivers to this receiver only when its webhook_allowed_networks hold loopback (refused by default).
LOOPBACK_NETWORKS = ["127.0.0.0/8", "::1/128"]


@dataclass(frozen=True)
class Received:
    at: float  # time.time() on arrival
    delivery_id: str
    signature_ok: bool
    body: bytes
    answered: int

    @property
    def payload(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass
class WebhookReceiver:
    secret: str
    port: int = 0  # 0: a free one
    fail_first: int = 0
    status: int = 200
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the receiver first (with WebhookReceiver(...) as receiver:)"
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def accepted(self) -> list[Received]:
        """The notifications answered 2xx, in arrival order."""
        with self._lock:
            return [r for r in self.received if 200 <= r.answered < 300]

    def record(self, delivery_id: str, signature: str, body: bytes) -> int:
        with self._lock:
            answered = 500 if len(self.received) < self.fail_first else self.status
            ok = verify(body, self.secret, signature)
            self.received.append(Received(time.time(), delivery_id, ok, body, answered))
        return answered

    def __enter__(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="webhook-receiver", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def _handler_for(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            code = receiver.record(self.headers.get(DELIVERY_HEADER, ""), self.headers.get(SIGNATURE_HEADER, ""), body)
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler
