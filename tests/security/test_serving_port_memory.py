"""Issue 35 #1, the serving port's memory: the key is checked before a byte of the body is read, a body's length is
capped where it is announced, the JSON is bounded in depth and size before it is decoded, and the bodies being read
at once are bounded in all — a keyless 60 MB body used to take the agent from 56 MB to 1.77 GB. Real sockets
against a real front end, in this process so that tracemalloc sees what it holds."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import tracemalloc
from collections.abc import Callable, Iterator

import httpx
import pytest
from pydantic import ValidationError

from inference_agent.http_server import Server
from inference_agent.serving.frontend.handler import TEXT_BODY_BYTES
from inference_agent.serving.frontend.schema import MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_JSON_VALUES, parse_json
from inference_agent.serving.frontend.server import Frontend
from inference_agent.serving.replica.app import ReplicaApp
from inference_agent.serving.replica.fake_engine import FakeTextEngine
from inference_agent.serving.replica.handler import handler_for
from inference_agent.serving.routing import Endpoint, PoolRoutes
from inference_agent.settings import AgentSettings

MIB = 1024 * 1024


@pytest.fixture
def frontend() -> Iterator[Frontend]:
    app, engine = ReplicaApp("p", "text"), FakeTextEngine(token_delay_s=0.001)
    app.ready(text_engine=engine)
    replica = Server("127.0.0.1", 0, handler_for(app), name="replica")
    replica.start()
    routes = {"p": PoolRoutes("text", (Endpoint("p-1", replica.port),))}
    frontend = Frontend(lambda: routes)
    frontend.start()
    yield frontend
    frontend.close()
    replica.close()
    engine.stop()


def exchange(
    port: int, body: bytes = b"", *, length: int | None = None, headers: str = "", path: str = "/v1/completions"
) -> bytes:
    """Send a request's head announcing ``length`` (else the body's) and ``body`` on a raw socket (no client-side
    copies for tracemalloc to count), and read the answer until the server closes or its length has come."""
    announced = len(body) if length is None else length
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        head = f"POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: {announced}\r\n{headers}\r\n"
        conn.sendall(head.encode())
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused unread: the answer waits
            conn.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return int(value)
    return 0


def post(frontend: Frontend, body: bytes, path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{frontend.port}{path}", content=body, timeout=30.0)


def test_an_unknown_key_is_refused_before_its_15_mb_body_is_read(frontend: Frontend) -> None:
    bad_key = "Authorization: Bearer fp_tenant_nobody\r\n"
    answer = exchange(frontend.port, length=15 * MIB, headers=bad_key, path="/v1/classify")
    assert answer.startswith(b"HTTP/1.1 401"), answer  # used to wait for the 15 MB, then parse them
    assert b"unknown or revoked tenant key" in answer


def test_a_body_announced_over_the_cap_is_refused_413_naming_it(frontend: Frontend) -> None:
    answer = exchange(frontend.port, length=60 * MIB)
    assert answer.startswith(b"HTTP/1.1 413"), answer  # used to read up to 64 MiB first
    assert str(16 * MIB).encode() in answer


def test_a_text_body_is_capped_at_what_a_text_request_can_hold(frontend: Frontend) -> None:
    """A completion's prompt is at most 64 KiB (384 KiB escaped): a 15 MB one is padding, refused unread."""
    answer = exchange(frontend.port, length=15 * MIB)
    assert answer.startswith(b"HTTP/1.1 413"), answer  # used to be read, decoded and forwarded: a 16 MiB cap
    assert str(TEXT_BODY_BYTES).encode() in answer and b"/v1/completions" in answer


@pytest.mark.parametrize(
    ("body", "bound"),
    [
        (b'{"model": "p", "prompt": ' + b"[" * 100 + b"]" * 100 + b"}", f"deeper than {MAX_JSON_DEPTH}"),
        (b'{"model": "p", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", f"deeper than {MAX_JSON_DEPTH}"),
        (b'{"model": "p", "inputs": [' + b"0," * 2_000_000 + b"0]}", f"{MAX_JSON_VALUES} values"),
        (b'{"model": "p", "inputs": [' + b"[]," * 100_000 + b"[]]}", f"{MAX_JSON_CONTAINERS} arrays"),
    ],
)
def test_json_past_its_depth_or_size_is_refused_naming_the_bound(frontend: Frontend, body: bytes, bound: str) -> None:
    answer = post(frontend, body, "/v1/classify" if len(body) > TEXT_BODY_BYTES else "/v1/completions")
    assert answer.status_code == 422, answer.text  # a 4 MB list of zeros used to be decoded whole first
    assert bound in answer.text


def test_the_largest_classify_request_fits() -> None:
    """64 images of 3×64×64 random floats as json.dumps writes them (~15.7 MB): the bounds are sized for it."""
    rng = random.Random(7)
    images = [[[[rng.random() for _ in range(64)] for _ in range(64)] for _ in range(3)] for _ in range(64)]
    raw = json.dumps({"model": "v", "inputs": images}).encode()
    assert 14.5 * MIB < len(raw) <= 16 * MIB
    assert len(parse_json(raw)["inputs"]) == 64


def concurrently(n: int, send: Callable[[], object]) -> None:
    threads = [threading.Thread(target=send) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def test_many_large_keyless_bodies_at_once_hold_a_bounded_memory(frontend: Frontend) -> None:
    many_values = b'{"model": "p", "inputs": [' + b"0.5," * (2 * MIB) + b"0]}"  # 8 MiB of numbers
    codes: list[int] = []
    tracemalloc.start()
    try:
        concurrently(16, lambda: codes.append(int(exchange(frontend.port, length=60 * MIB)[9:12])))
        concurrently(12, lambda: codes.append(int(exchange(frontend.port, many_values, path="/v1/classify")[9:12])))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert codes.count(413) == 16
    assert set(codes) - {413} <= {422, 503}  # past the bodies in flight: 503, nothing read
    # 12 bodies of 8 MiB: at most 64 MiB of them read at once, none decoded (2 M floats would be ~70 MB each)
    assert peak < 80 * MIB, f"peak {peak / MIB:.0f} MiB"
    assert frontend.bodies.used == 0  # every lease given back


def test_a_budget_smaller_than_one_body_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="could never be read"):
        AgentSettings(
            collector="http://c:8080",
            token="a-long-token",
            serve_max_body_bytes=32 * MIB,
            serve_max_body_bytes_in_flight=16 * MIB,
        )
