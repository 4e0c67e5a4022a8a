"""A sender's idle keep-alive connection stays usable: Prometheus' remote-write client keeps an idle connection 5
minutes (prometheus/common config.http_config, ``idleConnTimeout: 5 * time.Minute``) and uvicorn closed it after 5 s,
so a batch sent as the server closed met ``connection reset by peer`` or ``EOF`` and was retried (issue 39)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetpilot.launch import ServerProcess
from fleetpilot.settings import ServerSettings

pytestmark = pytest.mark.slow
PROMETHEUS_IDLE_CONN_SECONDS = 300.0  # prometheus/common's default, which remote write does not change
OTLP_COLLECTOR_IDLE_CONN_SECONDS = 90.0  # the OpenTelemetry Collector's confighttp default


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(f"sqlite:///{tmp_path / 'fleetpilot.db'}", log_path=tmp_path / "server.log") as server:
        yield server


def test_the_server_keeps_an_idle_connection_longer_than_the_senders_do() -> None:
    keep_alive = ServerSettings().http_keep_alive_seconds
    assert keep_alive > max(PROMETHEUS_IDLE_CONN_SECONDS, OTLP_COLLECTOR_IDLE_CONN_SECONDS)


def test_a_connection_idle_for_longer_than_5_s_is_still_served(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10.0) as conn:
        assert _get(conn, server.port).startswith(b"HTTP/1.1 200")
        time.sleep(6.5)  # past uvicorn's default keep-alive of 5 s
        assert _get(conn, server.port).startswith(b"HTTP/1.1 200"), "the server closed the idle connection"


def _get(conn: socket.socket, port: int) -> bytes:
    """One ``GET /healthz`` on ``conn``, kept alive; its whole answer (b"" when the server had closed it)."""
    conn.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = conn.recv(4096)
        if not chunk:
            return answer
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    length = int(lengths[0])
    while len(body) < length:
        body += conn.recv(4096)
    return answer
