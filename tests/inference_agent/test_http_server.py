"""The agent's HTTP server: bodies it refuses before reading, idle sockets it closes, connections it bounds."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from inference_agent.http_server import BodyRefused, ConnectionLimits, JsonHandler, Server, body_length

CAP = 1000


class Echo(JsonHandler):
    def on_get(self, path: str) -> None:
        self.answer_json(200, {"path": path})

    def on_post(self, path: str, body: bytes) -> None:
        self.answer_json(200, {"length": len(body)})


@pytest.mark.parametrize(
    ("content_length", "transfer_encoding", "length"),
    [(None, None, 0), ("0", None, 0), ("17", None, 17), (" 1000 ", None, 1000)],
)
def test_a_valid_length_is_read(content_length: str | None, transfer_encoding: str | None, length: int) -> None:
    assert body_length(content_length, transfer_encoding, CAP) == length


@pytest.mark.parametrize(
    ("content_length", "transfer_encoding", "code"),
    [
        ("-1", None, 400),
        ("abc", None, 400),
        ("1e3", None, 400),
        ("5,7", None, 400),
        ("١٢", None, 400),  # Arabic-Indic digits: str.isdigit() alone would take them
        ("1001", None, 413),
        ("9" * 5000, None, 413),  # int() of it would raise in Python 3.11
        (None, "chunked", 411),
        ("10", "chunked", 400),
    ],
)
def test_an_unreadable_body_is_refused(content_length: str | None, transfer_encoding: str | None, code: int) -> None:
    with pytest.raises(BodyRefused) as refused:
        body_length(content_length, transfer_encoding, CAP)
    assert refused.value.code == code


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server("127.0.0.1", 0, Echo, "test-http", poll_interval_s=0.05, limits=ConnectionLimits(8, 0.5))
    server.start()
    yield server
    server.close()


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        return conn.recv(4096)


def test_a_negative_length_is_answered_400_without_reading(server: Server) -> None:
    answer = raw_request(server.port, b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"Connection: close" in answer


def test_a_chunked_body_is_answered_411(server: Server) -> None:
    request = b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert raw_request(server.port, request).startswith(b"HTTP/1.1 411")


def test_a_normal_body_is_read(server: Server) -> None:
    assert httpx.post(f"http://127.0.0.1:{server.port}/x", content=b"12345").json() == {"length": 5}


def test_an_idle_connection_is_closed_after_the_socket_timeout(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        started = time.monotonic()
        assert conn.recv(1) == b""  # closed by the server, not by our 5 s timeout
        assert 0.4 < time.monotonic() - started < 3.0


def test_connections_past_the_bound_are_answered_503_and_served_again_once_free(server: Server) -> None:
    before = threading.active_count()
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(8)]
    try:
        time.sleep(0.1)  # let the accepting thread hand each to its thread
        assert threading.active_count() <= before + 8
        answer = raw_request(server.port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"Retry-After: 1" in answer
    finally:
        for conn in held:
            conn.close()
    deadline = time.monotonic() + 3
    while httpx.get(f"http://127.0.0.1:{server.port}/").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
