"""Stand-ins for the collector's ingest endpoint, for tests of the pusher.

``FakeCollector`` is an httpx transport: it keeps what it accepted (by ``seq``), counts duplicates like the real one,
and can be switched to refuse connections or answer an error status, to play an outage; with ``offers_compact`` it
offers the compact encoding (``wire.columnar``) in its answers and reads it, as the real one does, and without it
refuses a compact body 422, as an older collector does. ``ScriptedCollector`` is a real loopback HTTP server
answering every push with the bytes it is given, to play a collector (or a proxy in front of one) that answers what
the real one never would: ``200`` with HTML, ``Retry-After: inf``.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from inference_agent.http_server import JsonHandler, Server
from wire import columnar


@dataclass
class FakeCollector:
    token: str = "agent-token"
    down: bool = False
    status: int = 200
    retry_after: str | None = None
    offers_compact: bool = False
    desired: dict[str, Any] | None = None
    accepted: dict[int, dict[str, Any]] = field(default_factory=dict)
    duplicates: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)  # each push's, in order
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused (fake collector is down)", request=request)
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return httpx.Response(401, json=_error("unauthorized", "unknown token"))
        raw = request.content
        raw = gzip.decompress(raw) if request.headers.get("content-encoding") == "gzip" else raw
        content_type = request.headers.get("content-type", "")
        compact = content_type == columnar.MEDIA_TYPE
        if compact and not self.offers_compact:  # an older collector reads it as JSON, and refuses it
            return httpx.Response(422, json=_error("unprocessable_content", "body: not JSON"))
        body = columnar.decode_to_json(raw) if compact else json.loads(raw)
        with self._lock:
            self.requests.append(body)
            self.content_types.append(content_type)
            if self.status != 200:
                headers = {"Retry-After": self.retry_after} if self.retry_after else {}
                return httpx.Response(self.status, json=_error("unavailable", "fake failure"), headers=headers)
            fresh = 0
            for sample in body["samples"]:
                if sample["seq"] in self.accepted:
                    self.duplicates += 1
                else:
                    self.accepted[sample["seq"]] = sample
                    fresh += 1
        answer = {"accepted": fresh, "duplicates": len(body["samples"]) - fresh, "desired": self.desired}
        offer = {"Accept-Post": f"application/json, {columnar.MEDIA_TYPE}"} if self.offers_compact else {}
        return httpx.Response(200, json=answer, headers=offer)


def _error(code: str, message: str) -> dict[str, Any]:
    """The collector's error shape (web/errors.py)."""
    return {"error": {"code": code, "message": message, "field": None}}


@dataclass(frozen=True)
class ScriptedAnswer:
    status: int = 200
    body: bytes = b'{"accepted": 0, "duplicates": 0}'
    headers: tuple[tuple[str, str], ...] = ()


class ScriptedCollector:
    """A loopback HTTP server answering each ``POST /api/v1/ingest`` with ``answer`` (settable); counts pushes."""

    def __init__(self, answer: ScriptedAnswer) -> None:
        self.answer = answer
        self.pushes = 0
        self._server = Server("127.0.0.1", 0, _scripted_handler(self), "scripted-collector")
        self._server.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}"

    def close(self) -> None:
        self._server.close()


def _scripted_handler(collector: ScriptedCollector) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def on_post(self, path: str, body: bytes) -> None:
            answer = collector.answer
            collector.pushes += 1
            self.answer_bytes(answer.status, answer.body, "application/json", headers=dict(answer.headers))

    return Handler
