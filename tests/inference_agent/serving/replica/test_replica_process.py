"""A real replica process over the fake engine: completions, streams, 422s, drain and SIGTERM; and one over the
real torch engine."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from inference_agent.http_server import ConnectionLimits
from inference_agent.ports import free_port
from inference_agent.serving.supervision.launcher import LaunchSpec, ProcessLauncher

pytestmark = pytest.mark.slow


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"replica not ready within {timeout_s} s")

    def output(self) -> str:
        self.process.kill()
        out, _ = self.process.communicate(timeout=10)
        return out.decode(errors="replace")[-3000:]


def start(*args: str, ready_timeout_s: float = 20.0) -> Replica:
    port = free_port()
    command = [sys.executable, "-m", "inference_agent.serving.replica", "--port", str(port), *args]
    replica = Replica(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), port)
    try:
        replica.wait_ready(ready_timeout_s)
    except BaseException:
        replica.process.kill()
        replica.process.wait(10)
        raise
    return replica


@pytest.fixture
def text_replica() -> Iterator[Replica]:
    replica = start("--pool", "p", "--kind", "text", "--engine", "fake", "--token-delay-s", "0.01")
    yield replica
    if replica.process.poll() is None:
        replica.process.kill()
    replica.process.wait(10)


def test_completions_streams_and_422s(text_replica: Replica) -> None:
    url = f"{text_replica.url}/v1/completions"
    answer = httpx.post(url, json={"model": "p", "prompt": "abc", "max_tokens": 3}).json()
    assert answer["choices"][0]["finish_reason"] == "length" and len(answer["choices"][0]["text"]) == 3
    assert answer["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}  # 3 bytes + BOS
    with httpx.stream("POST", url, json={"model": "p", "prompt": "abc", "max_tokens": 3, "stream": True}) as stream:
        raw = stream.read().decode()
    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    texts = "".join(json.loads(e.removeprefix("data: "))["choices"][0]["text"] for e in events[:-2])
    assert texts == answer["choices"][0]["text"]  # deterministic: the same prompt gives the same text
    for body, field in (({"model": "p", "prompt": 1}, "prompt"), ({"prompt": "x"}, "model")):
        bad = httpx.post(url, json=body)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", field]
    stats = httpx.get(f"{text_replica.url}/stats").json()
    assert stats["requests"]["arrived"] == 2 and stats["engine"]["generated_tokens"] >= 6
    assert len(stats["latency"]["samples_seconds"]) == 2


def test_a_launched_replica_takes_the_http_limits(tmp_path: Path) -> None:
    launcher = ProcessLauncher(tmp_path, engine="fake", http=ConnectionLimits(4, 0.3))
    port = free_port()
    process = launcher.launch(LaunchSpec("p-1", "p", "text", port))
    try:
        deadline = time.monotonic() + 20
        while not answers(f"http://127.0.0.1:{port}/healthz"):
            assert process.poll() is None and time.monotonic() < deadline, launcher.log_tail("p-1")
            time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as idle:
            started = time.monotonic()
            assert idle.recv(1) == b""  # closed by the replica after its 0.3 s, not by our 5 s
            assert time.monotonic() - started < 3.0
    finally:
        process.kill()


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def test_drain_finishes_in_flight_work_refuses_new_and_sigterm_exits(text_replica: Replica) -> None:
    url = f"{text_replica.url}/v1/completions"
    results: list[httpx.Response] = []
    long = threading.Thread(
        target=lambda: results.append(httpx.post(url, json={"model": "p", "prompt": "x", "max_tokens": 100}))
    )
    long.start()  # 100 tokens × 10 ms ≈ 1 s
    deadline = time.monotonic() + 5
    while httpx.get(f"{text_replica.url}/stats").json()["requests"]["in_flight"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert httpx.post(f"{text_replica.url}/drain").json()["in_flight"] == 1
    refused = httpx.post(url, json={"model": "p", "prompt": "y", "max_tokens": 1})
    assert refused.status_code == 503
    assert httpx.get(f"{text_replica.url}/healthz").status_code == 503
    text_replica.process.send_signal(signal.SIGTERM)
    long.join(10)
    assert results[0].status_code == 200
    assert results[0].json()["usage"]["completion_tokens"] == 100  # finished, not cut short
    assert text_replica.process.wait(10) == 0


def test_sigterm_past_the_drain_deadline_aborts_what_is_left() -> None:
    replica = start(
        "--pool", "p", "--kind", "text", "--engine", "fake", "--token-delay-s", "0.05", "--drain-timeout-s", "0.3"
    )
    try:
        url = f"{replica.url}/v1/completions"
        results: list[httpx.Response] = []
        long = threading.Thread(
            target=lambda: results.append(httpx.post(url, json={"model": "p", "prompt": "x", "max_tokens": 1000}))
        )
        long.start()
        time.sleep(0.3)
        replica.process.send_signal(signal.SIGTERM)
        long.join(10)
        assert results[0].json()["choices"][0]["finish_reason"] == "abort"
        assert replica.process.wait(10) == 0
    finally:
        replica.process.kill()
        replica.process.wait(10)


def test_a_real_torch_replica_answers_once_warm() -> None:
    pytest.importorskip("torch")
    replica = start("--pool", "p", "--kind", "text", "--engine", "torch", ready_timeout_s=120)
    try:
        answer = httpx.post(
            f"{replica.url}/v1/completions", json={"model": "p", "prompt": "hi", "max_tokens": 4}, timeout=60
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["prompt_tokens"] == 3  # "hi" + BOS
        assert answer.json()["usage"]["completion_tokens"] >= 1
        stats = httpx.get(f"{replica.url}/stats").json()
        assert stats["engine"]["kv_blocks_total"] > 0
        replica.process.send_signal(signal.SIGTERM)
        assert replica.process.wait(30) == 0
    finally:
        replica.process.kill()
        replica.process.wait(10)


def test_a_real_torch_classifier_replica() -> None:
    pytest.importorskip("torch")
    replica = start("--pool", "c", "--kind", "classify", "--engine", "torch", ready_timeout_s=120)
    try:
        image = [[[0.5] * 64] * 64] * 3
        answer = httpx.post(f"{replica.url}/v1/classify", json={"model": "c", "inputs": [image, image]}, timeout=60)
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert len(results) == 2 and results[0] == results[1] and 0 <= results[0]["score"] <= 1
        # torch and the model are frozen once warm: a full collection no longer walks them (~173,000 objects,
        # 72 ms and more a collection), so it stalls no request (inference_agent/heap.py)
        assert httpx.get(f"{replica.url}/stats").json()["heap"]["frozen_objects"] > 100_000
    finally:
        replica.process.kill()
        replica.process.wait(10)
