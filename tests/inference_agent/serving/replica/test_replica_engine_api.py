"""A real built-in replica process read and called as a vLLM is: the agent's vLLM adapter over its /metrics, its
/health, /v1/models and chat completions; and the front end ending a stream whose replica is SIGKILLed."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.serving.frontend.server import Frontend
from inference_agent.serving.replica.metrics import E2E_BUCKETS_S
from inference_agent.serving.routing import Endpoint, PoolRoutes

from .test_replica_process import Replica, start

pytestmark = pytest.mark.slow


@pytest.fixture
def replica() -> Iterator[Replica]:
    served = ("--served-model-name", "org/model-7b")
    replica = start("--pool", "p", "--kind", "text", "--engine", "fake", "--token-delay-s", "0.01", *served)
    yield replica
    replica.process.kill()
    replica.process.wait(10)


def complete(replica: Replica, max_tokens: int) -> None:
    body = {"model": "org/model-7b", "prompt": "abc", "max_tokens": max_tokens}
    assert httpx.post(f"{replica.url}/v1/completions", json=body, timeout=30).status_code == 200


def complete_until_killed(replica: Replica, max_tokens: int) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the test kills the replica under it
        complete(replica, max_tokens)


def test_the_vllm_adapter_reads_rate_tokens_latency_and_queue(replica: Replica) -> None:
    now = [0.0]
    long: list[threading.Thread] = []
    probe = EngineScrapeProbe("vllm", f"{replica.url}/metrics", "p", clock=lambda: now[0])
    try:
        first = probe.read()[0]
        assert first.error is None, first.error
        slowest = 0.0
        for _ in range(5):  # 35 tokens × 10 ms: each e2e in vLLM's (0.3, 0.5] s bucket on an idle machine
            started = time.monotonic()
            complete(replica, 35)
            slowest = max(slowest, time.monotonic() - started)
        now[0] = 10.0
        reading = probe.read()[0]
        assert reading.metrics["request_rate_per_second"] == pytest.approx(0.5)  # 5 requests in 10 s
        assert reading.metrics["token_throughput_per_second"] == pytest.approx(17.5)  # 5 × 35 tokens in 10 s
        assert reading.extra["prompt_tokens_per_second"] == pytest.approx(2.0)  # 5 × ("abc" + BOS) in 10 s
        # the p99 lies in the bucket of the slowest request, which took at most what its caller waited (0.5 s when
        # idle; a machine running the suite's other workers may stretch the fake engine's 10 ms steps)
        assert 0.3 < reading.metrics["request_latency_p99_seconds"] <= min(e for e in E2E_BUCKETS_S if e >= slowest)
        assert reading.extra["time_to_first_token_p99_seconds"] <= 0.25
        assert reading.metrics["queue_depth_requests"] == 0

        # the fake engine runs 8 at once: 10 long requests leave 2 waiting in the replica's own queue
        long += [threading.Thread(target=complete_until_killed, args=(replica, 300)) for _ in range(10)]
        for thread in long:
            thread.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{replica.url}/stats").json()["engine"]["waiting"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        now[0] = 20.0
        loaded = probe.read()[0]
        assert loaded.metrics["queue_depth_requests"] == 2
        assert loaded.extra["requests_running"] == 8
        assert 0 < loaded.metrics["kv_cache_utilization_ratio"] <= 1
    finally:
        probe.close()
        replica.process.kill()
        for thread in long:
            thread.join(10)


def test_health_models_and_a_streamed_chat_as_vllm_answers_them(replica: Replica) -> None:
    assert httpx.get(f"{replica.url}/health").status_code == 200
    models = httpx.get(f"{replica.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["org/model-7b"]
    body = {"model": "org/model-7b", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2}
    answer = httpx.post(f"{replica.url}/v1/chat/completions", json=body).json()
    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] == 2
    with httpx.stream("POST", f"{replica.url}/v1/chat/completions", json={**body, "stream": True}) as stream:
        events = [line for line in stream.iter_lines() if line]
    assert events[-1] == "data: [DONE]" and len(events) == 1 + 2 + 1  # the role, two tokens, DONE
    metrics = httpx.get(f"{replica.url}/metrics").text
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="org/model-7b"} 2.0' in metrics


def test_a_replica_killed_mid_stream_ends_the_clients_stream_with_an_error(replica: Replica) -> None:
    frontend = Frontend(lambda: {"p": PoolRoutes("text", (Endpoint("r", replica.port),))})
    frontend.start()
    try:
        body = {"model": "p", "prompt": "x", "max_tokens": 1000, "stream": True}  # 10 s of tokens
        url = f"http://127.0.0.1:{frontend.port}/v1/completions"
        with httpx.stream("POST", url, json=body, timeout=10) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line).startswith("data: {")
            replica.process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            rest = [line for line in lines if line]
            ended_s = time.monotonic() - killed
        assert ended_s < 2.0
        assert "data: [DONE]" not in rest
        error = json.loads(rest[-1].removeprefix("data: "))
        assert error["error"]["code"] == 502 and "mid-stream" in error["error"]["message"]
    finally:
        frontend.close()
