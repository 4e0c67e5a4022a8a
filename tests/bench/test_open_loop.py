"""``bench.lib.open_loop``: the lean open-loop client sends each request at its time, over kept-alive connections,
and keeps the three clock readings that split the client's delay from the server's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from bench.lib.open_loop import LoadPlan, OpenLoopClient, request_bytes, run_plan
from inference_agent.http_server import JsonHandler, Server
from inference_agent.ports import free_port


class Echo(JsonHandler):
    def on_post(self, path: str, body: bytes) -> None:
        time.sleep(0.01)
        self.answer_json(200 if path == "/ok" else 429, {"bytes": len(body), "key": self.headers.get("X-Key")})


@pytest.fixture
def server() -> Iterator[str]:
    running = Server("127.0.0.1", 0, Echo, name="echo")
    running.start()
    yield f"http://127.0.0.1:{running.port}"
    running.close()


def plan(url: str, count: int = 10, rate_rps: float = 50.0) -> LoadPlan:
    return LoadPlan(url, b'{"x": 1}', {"X-Key": "k"}, rate_rps, count, time.monotonic() + 0.1)


def test_the_request_carries_its_headers_and_length() -> None:
    raw = request_bytes(plan("http://127.0.0.1:9/v1/classify", 1))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v1/classify HTTP/1.1"
    assert b"X-Key: k" in head and b"Content-Length: 8" in head and body == b'{"x": 1}'


def test_each_request_goes_at_its_time_and_keeps_send_and_answer_times(server: str) -> None:
    load = plan(f"{server}/ok", count=10, rate_rps=50.0)
    shots = asyncio.run(run_plan(load, warm_connections=2))
    assert [s.status for s in shots] == [200] * 10
    assert [s.scheduled for s in shots] == pytest.approx([load.start + i / 50.0 for i in range(10)])
    assert all(s.scheduled <= s.sent < s.done for s in shots)
    assert all(s.answer_s >= 0.01 for s in shots)  # the server sleeps 10 ms before it answers


def test_a_refusal_keeps_its_status_and_a_dead_port_its_error(server: str) -> None:
    assert {s.status for s in asyncio.run(run_plan(plan(f"{server}/busy", count=3), warm_connections=1))} == {429}
    dead = plan(f"http://127.0.0.1:{free_port()}/ok", count=2)
    with pytest.raises(OSError):  # no connection to warm: the plan fails before it sends
        asyncio.run(run_plan(dead, warm_connections=1))
    shots = asyncio.run(run_plan(dead, warm_connections=0))
    assert [(s.status, s.error) for s in shots] == [(0, "ConnectionRefusedError")] * 2


def test_the_client_process_runs_plans_until_closed(server: str) -> None:
    with OpenLoopClient() as client:
        first, second = client.run(plan(f"{server}/ok", count=3)), client.run(plan(f"{server}/ok", count=2))
    assert [s.status for s in first + second] == [200] * 5
