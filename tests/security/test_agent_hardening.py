"""Issue 15, the node agent: each test replays one attack on the agent and shows it no longer lands."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from inference_agent.fake_collector import ScriptedAnswer, ScriptedCollector
from inference_agent.http_server import ConnectionLimits, JsonHandler, Server
from inference_agent.serving.supervision.launcher import LaunchSpec, ReplicaProcess
from inference_agent.serving.supervision.pools import DesiredRefused, PoolSpec
from inference_agent.serving.supervision.reconcile import Timing, Verb, decide
from inference_agent.serving.supervision.supervisor import Supervisor
from tests.inference_agent.test_pusher import pusher_on
from wire.control import DesiredState


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_finding_12_bad_collector_answers_neither_end_nor_stall_the_pusher(tmp_path: Path) -> None:
    collector = ScriptedCollector(ScriptedAnswer(200, b"[]"))  # used to raise AttributeError and end the thread
    pusher, spool = pusher_on(tmp_path, httpx.Client(base_url=collector.url, timeout=5.0), max_retry_after_s=0.05)
    spool.append([{"ts": 1000.0, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.5}}])
    stop = threading.Event()
    thread = threading.Thread(target=pusher.run, args=(stop,), kwargs={"interval_s": 0.01, "seed": 1})
    thread.start()
    try:
        wait_for(lambda: collector.pushes >= 3)
        assert thread.is_alive() and spool.pending == 1
        collector.answer = ScriptedAnswer(503, b"{}", (("Retry-After", "1e9"),))  # used to sleep 31 years
        seen = collector.pushes
        wait_for(lambda: collector.pushes >= seen + 2, timeout_s=15.0)  # two jittered back-offs of 4 s at most
    finally:
        stop.set()
        thread.join(10)
        collector.close()
    assert "stopped" in (pusher.problem() or "")  # a pusher that stopped is reported, not silent


class NoLauncher:
    def launch(self, spec: LaunchSpec) -> ReplicaProcess:
        raise AssertionError(f"launched {spec.replica_id}")

    def log_tail(self, replica_id: str, lines: int = 20) -> str:
        return ""


def test_finding_13_a_desired_state_of_64000_replicas_starts_none() -> None:
    supervisor = Supervisor({"kept": PoolSpec(1)}, NoLauncher(), max_replicas=64)
    huge = {"pools": {f"p{i}": {"replicas": 64} for i in range(1000)}}
    with pytest.raises(ValidationError, match="at most 256 items"):  # the agent refuses it as it reads the answer
        DesiredState.model_validate(huge)
    with pytest.raises(DesiredRefused, match="12800 replicas in all"):
        supervisor.set_desired(DesiredState.model_validate({"pools": {f"p{i}": {"replicas": 64} for i in range(200)}}))
    assert supervisor.target() == {"kept": PoolSpec(1)}  # refused whole: what runs keeps running
    starts = [a for a in decide(supervisor.target(), [], 0.0, Timing()) if a.verb is Verb.START]
    assert len(starts) == 1


class Echo(JsonHandler):
    def on_get(self, path: str) -> None:
        self.answer_json(200, {"path": path})


def test_finding_14_half_open_connections_and_a_negative_length_do_not_take_the_server() -> None:
    server = Server("127.0.0.1", 0, Echo, "hardening", poll_interval_s=0.05, limits=ConnectionLimits(32, 1.0))
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            conn.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 400")  # used to wait for the client's EOF
        before = threading.active_count()
        half_open = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(300)]
        for conn in half_open:
            conn.sendall(b"GET / HTTP/1.1\r\n")  # and never the rest
        assert threading.active_count() <= before + 32  # used to be a thread each, then "can't start new thread"
        assert httpx.get(f"http://127.0.0.1:{server.port}/", timeout=2.0).status_code in (200, 503)
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{server.port}/", timeout=2.0).status_code == 200)
        for conn in half_open:  # each was refused at once (503), or closed after its 1 s without a request
            answer = conn.recv(4096)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 503"), answer
            conn.close()
    finally:
        server.close()
