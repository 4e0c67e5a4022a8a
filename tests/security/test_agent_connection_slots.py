"""Issue 35 #6, the agent's HTTP servers under slow sockets: a deadline on the whole request head, connections
bounded per peer, and a liveness probe that no remote client can starve. Real sockets against the real servers;
each attacker connects from its own loopback address (127.0.0.2, ...), as a remote peer would."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.endpoint import AgentEndpoint
from inference_agent.http_server import ConnectionLimits, JsonHandler, Server
from inference_agent.serving.frontend.server import Frontend
from inference_agent.serving.frontend.tenant_identity import GatewayTrust


class Echo(JsonHandler):
    def on_get(self, path: str) -> None:
        self.answer_json(200, {"path": path})


def slow_socket(port: int, source: str) -> socket.socket:
    """A connection that sends half a request line and nothing more (as with a byte every 20 s)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    conn.sendall(b"GET / HTTP/1.1\r\n")
    return conn


def get_from(source: str, url: str) -> httpx.Response:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=5.0) as client:
        return client.get(url)


@pytest.fixture
def echo() -> Iterator[Server]:
    limits = ConnectionLimits(max_connections=32, socket_timeout_s=30.0, head_timeout_s=1.0, max_connections_per_peer=8)
    server = Server("127.0.0.1", 0, Echo, "slots", poll_interval_s=0.05, limits=limits)
    server.start()
    yield server
    server.close()


def test_a_head_sent_a_byte_at_a_time_is_cut_at_its_whole_deadline(echo: Server) -> None:
    """Each byte comes well within the 30 s idle timeout; the head as a whole gets 1 s, not 30 s a byte."""
    conn = socket.create_connection(("127.0.0.1", echo.port), timeout=5)
    conn.sendall(b"GET / HTTP/1.1\r\n")
    cut = False
    try:
        for _ in range(40):  # 40 × 0.2 s = 8 s of trickling, 8× the deadline
            time.sleep(0.2)
            conn.sendall(b"X")
    except (BrokenPipeError, ConnectionResetError):
        cut = True
    if not cut:
        conn.settimeout(2.0)
        try:
            answer = conn.recv(4096)
        except TimeoutError:
            answer = None
        cut = answer is not None and (answer == b"" or answer.startswith(b"HTTP/1.1 408"))
    conn.close()
    assert cut, "the server still waits for the head after 8 s of one byte every 0.2 s"


def test_one_peer_holds_at_most_its_share_of_the_slots(echo: Server) -> None:
    held = [slow_socket(echo.port, "127.0.0.2") for _ in range(40)]  # more than all 32 slots
    try:
        time.sleep(0.2)
        answer = get_from("127.0.0.3", f"http://127.0.0.1:{echo.port}/")
        assert answer.status_code == 200  # used to be 503: one peer held all 32 slots
        refused = [c for c in held if c.recv(4096).startswith(b"HTTP/1.1 503")]
        assert len(refused) == 40 - 8  # past its 8, each is told at once, in words
    finally:
        for conn in held:
            conn.close()


def test_the_liveness_probe_answers_while_remote_peers_hold_every_slot() -> None:
    limits = ConnectionLimits(
        max_connections=16, socket_timeout_s=30.0, head_timeout_s=30.0, max_connections_per_peer=4
    )
    endpoint = AgentEndpoint("127.0.0.1", 0, CollectorRegistry(), lambda: {"status": "ok"}, limits=limits)
    endpoint.start()
    held = [slow_socket(endpoint.port, f"127.0.0.{2 + i // 4}") for i in range(16)]  # 4 peers × 4: every slot
    try:
        time.sleep(0.2)
        assert get_from("127.0.0.9", f"http://127.0.0.1:{endpoint.port}/healthz").status_code == 503  # full
        # the kubelet probes from the node's own address, the one the endpoint listens on: a slot kept for it
        assert get_from("127.0.0.1", f"http://127.0.0.1:{endpoint.port}/healthz").status_code == 200
    finally:
        for conn in held:
            conn.close()
        endpoint.close()


def answered_at_once(conn: socket.socket) -> bytes | None:
    """What the server sent a fresh connection within 0.5 s (None: nothing, the connection is held)."""
    conn.settimeout(0.5)
    try:
        return conn.recv(4096)
    except TimeoutError:
        return None


def test_a_trusted_gateway_is_one_address_with_many_connections() -> None:
    limits = ConnectionLimits(
        max_connections=32, socket_timeout_s=30.0, head_timeout_s=30.0, max_connections_per_peer=4
    )
    gateway = GatewayTrust.parse("X-Tenant", ["127.0.0.2"])
    frontend = Frontend(dict, gateway=gateway, connections=limits)
    frontend.start()
    from_gateway = [slow_socket(frontend.port, "127.0.0.2") for _ in range(8)]
    from_client = [slow_socket(frontend.port, "127.0.0.3") for _ in range(5)]
    try:
        assert [answered_at_once(c) for c in from_gateway] == [None] * 8  # all 8 held: its callers are many
        refused = [c for c in from_client if (answered_at_once(c) or b"").startswith(b"HTTP/1.1 503")]
        assert len(refused) == 1  # any other address: 4 at most
    finally:
        for conn in from_gateway + from_client:
            conn.close()
        frontend.close()


def test_a_client_that_resets_leaves_no_traceback(echo: Server, capfd: pytest.CaptureFixture[str]) -> None:
    """300 resets would be 300 tracebacks on the agent's stderr: the log an operator reads drowned by a client."""
    for _ in range(5):
        conn = socket.create_connection(("127.0.0.1", echo.port), timeout=5)
        conn.sendall(b"GET / HTTP/1.1\r\n")
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset, not a close
    assert get_from("127.0.0.3", f"http://127.0.0.1:{echo.port}/").status_code == 200
    assert "Traceback" not in capfd.readouterr().err


def test_by_default_one_busy_address_keeps_most_slots_and_others_keep_some() -> None:
    """A load balancer, or one client with many requests queued at the front end (bench.workload's replay held over
    64), is one address: by default it may hold 192 of the 256 slots, and 64 stay for everyone else."""
    server = Server("127.0.0.1", 0, Echo, "slots", poll_interval_s=0.05, limits=ConnectionLimits())
    server.start()
    held = [slow_socket(server.port, "127.0.0.2") for _ in range(200)]
    try:
        time.sleep(0.3)
        others = [get_from("127.0.0.3", f"http://127.0.0.1:{server.port}/").status_code for _ in range(3)]
        assert others == [200, 200, 200]
        for conn in held:
            conn.settimeout(0.05)
        refused = 0
        for conn in held:
            with contextlib.suppress(TimeoutError):
                refused += conn.recv(4096).startswith(b"HTTP/1.1 503")
        assert refused == 200 - 192  # the first 192 are held open, waiting for their heads
    finally:
        for conn in held:
            conn.close()
        server.close()
