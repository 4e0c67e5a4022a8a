"""The agent's HTTP: an HTTP/1.1 request handler with JSON answers and chunked streams, on the standard library's
threading server. The replicas, the serving front end and the agent's own endpoint all use it.

It stays on the standard library, hardened, rather than moving to uvicorn: ``fleetpilot[agent]`` must install without
the server's dependencies (CONTRACT section 1), and the handlers stream by writing chunks from a thread, which ASGI
would make a rewrite of every route. What a maintained server would give us is done here instead: a request body has
a valid, bounded ``Content-Length`` (a negative, non-numeric or chunked one is refused before any body is read), each
connection's socket times out when idle, a request's head must arrive whole within ``head_timeout_s`` (and its body
at 1 MiB/s after that: ``http_limits.py``), and at most ``max_connections`` connections hold a thread at once, at
most ``max_connections_per_peer`` of them from one address — past that a new connection is answered 503 and closed,
so 300 half-open connections cost 256 threads, not 300 and then ``can't start new thread``, and one peer cannot
hold them all.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from inference_agent.http_limits import DeadlineReader, Network, PeerSlots, Slot, body_budget_s

# the largest request the serving API takes: 64 classify images of 3×64×64 floats as json.dumps writes them (about
# 20 characters a value) are 64 × 12,288 × 20 = 15.7 MB; a text request is at most 64 KiB of prompt (384 KiB escaped)
MAX_BODY_BYTES = 16 * 1024 * 1024
log = logging.getLogger(__name__)
LISTEN_BACKLOG = 128  # socketserver's 5 makes a burst of 300 connects wait out SYN retries (1 s, 3 s, ...)


def _busy_answer(detail: str) -> bytes:
    body = f'{{"detail": "{detail}; retry in a second"}}'.encode()
    head = f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n".encode()
    return b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" + head + body


BUSY_ANSWERS = {
    Slot.SERVER_FULL: _busy_answer("too many connections"),
    Slot.PEER_FULL: _busy_answer("too many connections from your address"),
}


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections a server serves at once (and from one address), how long a connection's socket may sit
    idle, how long a request's whole head may take to arrive, and the largest body it reads; ``reserved_local``
    more slots are kept for the address the server listens on (the agent's endpoint keeps them for the kubelet's
    probe)."""

    max_connections: int = 256
    socket_timeout_s: float = 30.0
    head_timeout_s: float = 10.0
    max_connections_per_peer: int = 192  # 3/4: a load balancer or one busy client is one address; 64 stay for others
    reserved_local: int = 0
    max_body_bytes: int = MAX_BODY_BYTES
    unbounded_peers: tuple[Network, ...] = ()  # not held to the per-peer bound: a trusted gateway is one address


class BodyRefused(Exception):
    """A request whose body cannot be read safely; ``code`` is the status to answer it with."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def body_length(content_length: str | None, transfer_encoding: str | None, max_bytes: int) -> int:
    """The body's length from the request's headers, or BodyRefused: ``-1`` → 400, ``chunked`` → 411, 65 MB → 413.

    A chunked body would need its size discovered while reading it; no client of the agent sends one, so it is
    refused with 411 (send a Content-Length) rather than read. Both headers at once is the smuggling shape: 400.
    """
    if transfer_encoding is not None:
        if content_length is not None:
            raise BodyRefused(400, "both Content-Length and Transfer-Encoding")
        raise BodyRefused(411, "a request body needs a Content-Length (Transfer-Encoding is not accepted)")
    if content_length is None:
        return 0
    value = content_length.strip()
    if not value.isascii() or not value.isdigit():
        raise BodyRefused(400, f"Content-Length {content_length[:20]!r} is not a non-negative integer")
    # more digits than the cap has cannot fit under it; and int() of a 5,000-digit string raises in Python 3.11
    if len(value) > len(str(max_bytes)) or int(value) > max_bytes:
        raise BodyRefused(413, f"a request body is at most {max_bytes} bytes; this one is {value[:20]}")
    return int(value)


class ClientGone(Exception):
    """The client closed the connection while we were answering."""


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1: every answer has a length, or is chunked."""

    protocol_version = "HTTP/1.1"
    head_timeout_s = 10.0  # Server sets both from its ConnectionLimits
    max_body_bytes = MAX_BODY_BYTES

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the stock reader: this one bounds a request's whole reading, not each recv
        self._reader = DeadlineReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.arm(self.head_timeout_s)  # from the wait for the request line to the end of its headers
        super().handle_one_request()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._reader.disarm()
        return parsed

    def do_GET(self) -> None:
        if self.headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in self.headers:
            self.close_connection = True  # its body is not read: what follows on the socket is not a request
        self.on_get(self.path.split("?")[0])

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        length = self.announced_length()
        if length is None:
            return
        if not self.before_body(path, length):
            self.close_connection = True  # its body is not read: what follows on the socket is not a request
            return
        try:
            self.on_post(path, self._read(length))
        finally:
            self.after_body()

    def on_get(self, path: str) -> None:
        self.answer_json(404, {"detail": f"not found: {path}"})

    def before_body(self, path: str, length: int) -> bool:
        """Whether to read a body of ``length`` bytes, from the request's head alone; a handler that refuses answers
        first (the body stays unread, so the connection closes)."""
        return True

    def on_post(self, path: str, body: bytes) -> None:
        self.answer_json(404, {"detail": f"not found: {path}"})

    def after_body(self) -> None:
        """The request is done with (answered or failed): give back what ``before_body`` took."""

    def read_body(self) -> bytes | None:
        """The request body, or None after answering 400, 411 or 413 (and closing) for one that cannot be read."""
        length = self.announced_length()
        return None if length is None else self._read(length)

    def announced_length(self) -> int | None:
        """The body's announced length, or None after answering 400, 411 or 413 (and closing) for one that cannot
        be read."""
        try:
            return body_length(
                _one_header(self.headers.get_all("Content-Length")),
                _one_header(self.headers.get_all("Transfer-Encoding")),
                self.max_body_bytes,
            )
        except BodyRefused as refused:
            self.answer_json(refused.code, {"detail": refused.detail}, close=True)
            return None

    def _read(self, length: int) -> bytes:
        """The body's ``length`` bytes, within the time a body that long gets (TimeoutError past it)."""
        if not length:
            return b""
        self._reader.arm(body_budget_s(self.head_timeout_s, length))
        body = self.rfile.read(length)
        self._reader.disarm()
        return body

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


def _one_header(values: list[str] | None) -> str | None:
    """A header sent once, or its repeats when they agree; ``Content-Length: 5, 7`` in two lines reads as "5,7",
    which ``body_length`` refuses as not a number."""
    if not values:
        return None
    return values[0] if len(set(values)) == 1 else ",".join(values)


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, up to ``max_connections`` at once and ``max_connections_per_peer`` from one address;
    past that the connection is answered 503."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], limits: ConnectionLimits):
        super().__init__(address, handler)
        self._slots = PeerSlots(
            limits.max_connections,
            limits.max_connections_per_peer,
            limits.reserved_local,
            address[0],
            limits.unbounded_peers,
        )

    def process_request(self, request: Any, client_address: Any) -> None:
        slot = self._slots.take(client_address[0])
        if slot is not Slot.GRANTED:
            _refuse_busy(request, BUSY_ANSWERS[slot])
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread started (``can't start new thread``): its slot is free again
            self._slots.give_back(client_address[0])
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that reset or left is no error of ours (300 of them would bury the log); anything else is."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            log.exception("request from %s failed", client_address[0])

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.give_back(client_address[0])


def _refuse_busy(connection: socket.socket, answer: bytes) -> None:
    """Answer 503 on the accepting thread: a fresh socket's send buffer takes these 200 bytes without blocking."""
    try:
        connection.settimeout(1.0)
        connection.sendall(answer)
        connection.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the client is already gone
    finally:
        connection.close()


class Server:
    """A bounded threading HTTP server run on its own thread; ``port`` is known once constructed (0 picks a free
    one). Each connection's socket times out after ``limits.socket_timeout_s`` without traffic, and a request's head
    after ``limits.head_timeout_s`` in all."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        name: str,
        *,
        poll_interval_s: float = 0.5,
        limits: ConnectionLimits = ConnectionLimits(),
    ) -> None:
        # The poll interval only bounds how long close() waits; a shorter one wakes an idle agent needlessly
        # (0.05 s is 20 wake-ups a second per server).
        bounds = {
            "timeout": limits.socket_timeout_s,  # StreamRequestHandler's
            "head_timeout_s": limits.head_timeout_s,
            "max_body_bytes": limits.max_body_bytes,
        }
        timed = type(handler.__name__, (handler,), bounds)
        self._server = _BoundedServer((host, port), timed, limits)
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
