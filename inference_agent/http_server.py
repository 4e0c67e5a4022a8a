"""The agent's HTTP: an HTTP/1.1 request handler with JSON answers and chunked streams, on the standard library's
threading server (no web framework in ``fleetpilot[agent]``). The replicas, the serving front end and the agent's
own endpoint all use it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 64 * 1024 * 1024  # 64 images of 3×64×64 floats as JSON text is about 15 MB


class ClientGone(Exception):
    """The client closed the connection while we were answering."""


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1: every answer has a length, or is chunked."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.on_get(self.path.split("?")[0])

    def do_POST(self) -> None:
        body = self.read_body()
        if body is not None:
            self.on_post(self.path.split("?")[0], body)

    def on_get(self, path: str) -> None:
        self.answer_json(404, {"detail": f"not found: {path}"})

    def on_post(self, path: str, body: bytes) -> None:
        self.answer_json(404, {"detail": f"not found: {path}"})

    def read_body(self) -> bytes | None:
        """The request body, or None after answering 413 for one too large."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.answer_json(413, {"detail": f"body over {MAX_BODY_BYTES} bytes"}, close=True)
            return None
        return self.rfile.read(length) if length else b""

    def answer_json(
        self, code: int, body: dict[str, Any], *, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        self.answer_bytes(code, json.dumps(body).encode(), "application/json", headers=headers, close=close)

    def answer_bytes(
        self,
        code: int,
        payload: bytes,
        content_type: str,
        *,
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def start_stream(self, code: int, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        """One chunk, flushed at once; raises ClientGone when the client has left."""
        if not data:
            return
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            self.close_connection = True
            raise ClientGone from exc

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per request would bury what matters


class Server:
    """A threading HTTP server run on its own thread; ``port`` is known once constructed (0 picks a free one)."""

    def __init__(
        self, host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str, *, poll_interval_s: float = 0.5
    ) -> None:
        # The poll interval only bounds how long close() waits; a shorter one wakes an idle agent needlessly
        # (0.05 s is 20 wake-ups a second per server).
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": poll_interval_s}, name=name, daemon=True
        )

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
