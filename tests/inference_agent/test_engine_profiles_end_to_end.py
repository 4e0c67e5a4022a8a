"""A real server and real agents whose config declares an engine profile: the built-in replica run as an external
process (vLLM's /health and /metrics names). No agent is started with the pool: ``POST /pools`` places it, the front
end answers completions and streamed chat completions, a scale-down drains without a failed request, a SIGKILLed
replica comes back after its back-off, a node that stops pushing loses its routing weight within 3 s and its
replica is started on the other node, with detection-to-ready recorded."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from autoscaler.failover import FailoverStore
from collector.database import make_engine
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.ports import free_port
from tests.support.fleet import Fleet, stop_agent

pytestmark = pytest.mark.slow
PROFILE = """
labels = {{ zone = "{zone}" }}

[profiles.builtin-vllm]
command = ["{{python}}", "-m", "inference_agent.serving.replica", "--pool", "{{pool}}", "--kind", "text",
           "--port", "{{port}}", "--engine", "fake", "--token-delay-s", "0.005",
           "--served-model-name", "{{model}}", "--drain-timeout-s", "10"]
health_path = "/health"
metrics_path = "/metrics"
metrics_kind = "vllm"
models = ["tiny-chat"]
startup_timeout_seconds = 60
drain_grace_seconds = 10
"""
POOL = {
    "name": "chat",
    "engine": "builtin-vllm",
    "model": "tiny-chat",
    "policy": "static",
    "min_replicas": 2,
    "max_replicas": 2,
    "startup_seconds": 5,
}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    env = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5"}
    with ServerProcess(f"sqlite:///{tmp_path}/profiles.db", env=env, log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def start_node(fleet: Fleet, node_id: str, zone: str = "eu-1") -> AgentProcess:
    config = fleet.tmp / f"{node_id}.toml"
    config.write_text(PROFILE.format(zone=zone))
    return fleet.start_agent(node_id, config=config, serve_port=free_port())


def api(fleet: Fleet, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {fleet.server.admin_token}"}
    return httpx.request(method, f"{fleet.server.url}/api/v1{path}", json=body, headers=headers, timeout=10)


def pools_on(agent: AgentProcess) -> dict[str, Any]:
    pools: dict[str, Any] = httpx.get(f"{agent.metrics_url}/healthz", timeout=5).json().get("pools", {})
    return pools


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> float:
    """Seconds until ``condition`` held."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)
    return time.monotonic() - started


def ready(agent: AgentProcess, pool: str = "chat") -> int:
    return int(pools_on(agent).get(pool, {}).get("ready", 0))


def replica_pids(agent: AgentProcess) -> list[int]:
    assert agent.process is not None
    pids = []
    for child in psutil.Process(agent.process.pid).children():
        try:  # a replica just stopped may be a zombie until the agent reaps it, or gone: either way not running
            running = child.status() != psutil.STATUS_ZOMBIE
            if running and "inference_agent.serving.replica" in " ".join(child.cmdline()):
                pids.append(child.pid)
        except psutil.NoSuchProcess:  # ZombieProcess is one
            continue
    return pids


def events(fleet: Fleet, pool: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api(fleet, "GET", f"/scaling-events?pool={pool}").json()["items"]
    return items


def sse_events(lines: Iterator[str]) -> list[str]:
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


def test_a_pool_posted_centrally_runs_on_a_node_that_declares_its_engine(fleet: Fleet) -> None:
    agent = start_node(fleet, "node-a")
    try:
        assert api(fleet, "POST", "/pools", POOL).status_code == 201
        first_ready_s = wait_for(lambda: ready(agent) >= 1, "a replica of chat ready on node-a")
        wait_for(lambda: ready(agent) == 2, "both replicas ready")
        assert pools_on(agent)["chat"]["engine"] == "builtin-vllm"
        assert first_ready_s < 30
        url = agent.serve_url
        # completions, by the pool's name and by the model it serves
        for model in ("chat", "tiny-chat"):
            answer = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 4})
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == "tiny-chat"  # the engine saw its own model's name
        body = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as answer:
            assert answer.status_code == 200
            data = sse_events(answer.iter_lines())
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        models = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
        assert {"chat", "tiny-chat"} <= {m["id"] for m in models}
    finally:
        stop_agent(agent)


def test_scale_down_drains_without_a_failed_request_and_a_killed_replica_comes_back(fleet: Fleet) -> None:
    agent = start_node(fleet, "node-a")
    try:
        assert api(fleet, "POST", "/pools", {**POOL, "min_replicas": 1}).status_code == 201
        assert api(fleet, "POST", "/pools/chat/scale", {"replicas": 2, "reason": "test: two"}).status_code == 200
        wait_for(lambda: ready(agent) == 2, "both replicas ready")
        codes: list[int] = []
        stop = threading.Event()

        def load() -> None:
            body = {"model": "chat", "prompt": "x", "max_tokens": 40, "stream": True}
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    with client.stream("POST", f"{agent.serve_url}/v1/completions", json=body) as answer:
                        events_ = sse_events(answer.iter_lines())
                        codes.append(answer.status_code if events_[-1:] == ["[DONE]"] else 599)

        clients = [threading.Thread(target=load) for _ in range(4)]
        for client in clients:
            client.start()
        time.sleep(1.0)
        scaled = api(fleet, "POST", "/pools/chat/scale", {"replicas": 1, "reason": "test: drain one"})
        assert scaled.status_code == 200, scaled.text
        wait_for(lambda: ready(agent) == 1 and len(replica_pids(agent)) == 1, "one replica left, the other gone")
        time.sleep(1.0)
        stop.set()
        for client in clients:
            client.join()
        assert len(codes) > 20 and set(codes) == {200}, f"{len(codes)} requests, codes {sorted(set(codes))}"

        (pid,) = replica_pids(agent)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: ready(agent) == 0, "the killed replica noticed")
        back_s = wait_for(lambda: ready(agent) == 1, "the replica restarted")
        assert replica_pids(agent) != [pid]
        crashes = httpx.get(f"{agent.metrics_url}/metrics", timeout=5).text
        assert 'fleetpilot_agent_replica_crashes_total{pool="chat"} 1.0' in crashes
        assert back_s >= 0.5  # the back-off (1 s) was waited out, not a tight loop
    finally:
        stop_agent(agent)


def test_an_engine_no_node_declares_is_not_placed_and_the_event_says_why(fleet: Fleet) -> None:
    agent = start_node(fleet, "node-a")
    try:
        wait_for(lambda: bool(fleet.stored("node-a").rows), "node-a pushing")
        pool = {**POOL, "name": "other", "engine": "sglang", "model": "Qwen/Qwen2.5-7B-Instruct"}
        assert api(fleet, "POST", "/pools", pool).status_code == 201
        wait_for(lambda: bool(events(fleet, "other")), "a scaling event for other")
        said = json.dumps(events(fleet, "other")[0])
        assert "node-a" in said and "sglang" in said, said
        assert "other" not in pools_on(agent)
        assert replica_pids(agent) == []
    finally:
        stop_agent(agent)


def test_a_node_that_stops_pushing_is_failed_over_within_seconds(fleet: Fleet) -> None:
    a, b = start_node(fleet, "node-a"), start_node(fleet, "node-b")
    try:
        assert api(fleet, "POST", "/pools", POOL).status_code == 201
        wait_for(lambda: ready(a) == 1 and ready(b) == 1, "one replica on each node")
        weights = api(fleet, "GET", "/routing/weights?pool=chat").json()
        assert {w["node"] for w in weights["items"]} == {"node-a", "node-b"}, weights
        a.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        killed_at = time.monotonic()
        wait_for(
            lambda: {w["node"] for w in api(fleet, "GET", "/routing/weights?pool=chat").json()["items"]} == {"node-b"},
            "node-a dropped from the routing weights",
            timeout_s=10,
        )
        dropped_s = time.monotonic() - killed_at
        wait_for(lambda: ready(b) == 2, "chat's second replica on node-b", timeout_s=60)
        engine = make_engine(fleet.server.database_url)
        try:
            wait_for(lambda: bool(FailoverStore(engine).since(0.0)), "the failover recorded")
            (failover,) = FailoverStore(engine).since(0.0)
            wait_for(lambda: FailoverStore(engine).since(0.0)[0].ready_at is not None, "the failover closed")
            (failover,) = FailoverStore(engine).since(0.0)
        finally:
            engine.dispose()
        assert (failover.pool, failover.node_id, failover.replicas) == ("chat", "node-a", 1)
        assert failover.ready_at is not None and 0 < failover.ready_at - failover.detected_at < 30
        assert dropped_s < 4.0  # 3 s without a push, plus the test's own polling
    finally:
        stop_agent(b)
        a.kill()
