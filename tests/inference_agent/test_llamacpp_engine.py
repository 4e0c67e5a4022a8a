"""A real engine, not ours: llama.cpp's ``llama-server`` (built by scripts/build-llama-server.sh from the llama.cpp
that PyPI's llama-cpp-python sdist vendors) serving a tiny model the test writes, run by an agent as an engine
profile its config declares. The pool is posted centrally and placed; the front end answers completions and a
streamed chat completion from it; the agent reads its Prometheus ``/metrics`` through the llamacpp adapter, and the
server stores the pool's token throughput. Skipped without the binary, except in CI, which builds it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.ports import free_port
from tests.support.fleet import Fleet, stop_agent
from tests.support.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.slow
LLAMA_SERVER = Path(os.environ.get("FLEETPILOT_TEST_LLAMA_SERVER", ".cache/llama-server/bin/llama-server")).absolute()
if not LLAMA_SERVER.exists():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{LLAMA_SERVER} is missing: .ci/run builds it with scripts/build-llama-server.sh")
    pytest.skip(f"no llama-server at {LLAMA_SERVER}: run scripts/build-llama-server.sh", allow_module_level=True)

PROFILE = """
[profiles.llamacpp]
command = ["{llama_server}", "-m", "{{model}}", "--host", "{{host}}", "--port", "{{port}}", "--metrics",
           "-c", "1024", "-np", "2", "-t", "1"]
health_path = "/health"
metrics_kind = "llamacpp"
models = ["{model}"]
startup_timeout_seconds = 60
drain_grace_seconds = 10
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    env = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5"}
    with ServerProcess(f"sqlite:///{tmp_path}/llama.db", env=env, log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def api(fleet: Fleet, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {fleet.server.admin_token}"}
    return httpx.request(method, f"{fleet.server.url}/api/v1{path}", json=body, headers=headers, timeout=10)


def ready(agent: AgentProcess) -> int:
    return int(
        httpx.get(f"{agent.metrics_url}/healthz", timeout=5).json().get("pools", {}).get("tiny", {}).get("ready", 0)
    )


def wait_for(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.2)


def pool_reading(fleet: Fleet, node: str) -> dict[str, float]:
    series = api(fleet, "GET", f"/nodes/{node}").json()["series"]
    found: dict[str, float] = next((s["metrics"] for s in series if s["pool"] == "tiny"), {})
    return found


def test_llama_cpp_runs_as_an_engine_profile_served_and_read_through_its_adapter(fleet: Fleet) -> None:
    model = write_tiny_gguf(fleet.tmp / "tiny.gguf")
    config = fleet.tmp / "node.toml"
    config.write_text(PROFILE.format(llama_server=LLAMA_SERVER, model=model))
    agent = fleet.start_agent("node-a", config=config, serve_port=free_port())
    try:
        pool = {"name": "tiny", "engine": "llamacpp", "model": str(model), "policy": "static", "min_replicas": 1}
        assert api(fleet, "POST", "/pools", {**pool, "max_replicas": 1}).status_code == 201
        wait_for(lambda: ready(agent) == 1, "llama-server ready on its /health")
        url = f"{agent.serve_url}/v1"
        body = {"model": "tiny", "prompt": "hello world", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        for _ in range(5):
            answer = httpx.post(f"{url}/completions", json=body, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] == 8
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "stream": True}
        with httpx.stream("POST", f"{url}/chat/completions", json=chat, timeout=30) as answer:
            assert answer.status_code == 200
            events = [line.removeprefix("data: ") for line in answer.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert {json.loads(e)["object"] for e in events[:-1]} == {"chat.completion.chunk"}
        # the adapter's rate needs two scrapes around the requests; keep the engine busy until the server has it
        deadline = time.monotonic() + 30
        while not pool_reading(fleet, "node-a").get("token_throughput_per_second"):
            assert time.monotonic() < deadline, f"no token throughput stored: {pool_reading(fleet, 'node-a')}"
            httpx.post(f"{url}/completions", json=body, timeout=30)
        reading = pool_reading(fleet, "node-a")
        assert reading["token_throughput_per_second"] > 0
        assert "request_latency_p99_seconds" not in reading  # llama.cpp has no latency histogram: absent, not 0
        absent = httpx.get(f"{agent.metrics_url}/metrics", timeout=5).text
        assert "fleetpilot_agent_engine_metric_absent{" in absent and 'metric="request_latency_p99_seconds"' in absent
    finally:
        stop_agent(agent)
