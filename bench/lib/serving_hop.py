"""The serving part of ``python -m bench.workload``: what the front end and a replica process cost, and how fast the
control plane puts a pool on a node.

The same trace as the engine part, twice: straight into the built-in text engine in this process (the baseline), and
through a real agent's front end (``--serve-port``) to the same engine run as an engine profile's replica — a process
the agent started from its config file, as it would start vLLM — with a real server placing the pool. Both read
every request's stream to the end; tokens are counted as streamed. Also measured: ``POST /pools`` → the first
replica ready on the node (with no agent started with the pool), and a failover: a second node joins, the first is
SIGKILLed, and the server's failover record gives detection → ready on the other node. And the hop alone: one
request at a time (one token each) to the replica's own port and through the front end, medians of each — what
the front end adds to a request when nothing else competes for the machine's cores.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from autoscaler.failover import FailoverStore
from bench.lib.engine_replay import ReplayResult, replay
from bench.lib.progress import progress_line
from collector.database import make_engine
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.ports import free_port
from inference_agent.serving.replica.key import REPLICA_KEY_ENV
from inference_agent.torch_runtime.config import ModelConfig
from inference_agent.torch_runtime.engine import ContinuousBatchingEngine, EngineConfig
from replay.trace_load import TraceRequest
from wire.percentile import percentile

# The built-in replica as a node declares it: the torch engine a replica builds by default, generating exactly
# max_tokens as the engine part does.
PROFILE = """
[profiles.builtin-torch]
command = ["{python}", "-m", "inference_agent.serving.replica", "--pool", "{pool}", "--kind", "text",
           "--port", "{port}", "--engine", "torch", "--ignore-eos", "--served-model-name", "{model}"]
health_path = "/health"
metrics_kind = "vllm"
models = ["tiny-torch"]
startup_timeout_seconds = 120
"""
POOL = {
    "name": "bench-chat",
    "engine": "builtin-torch",
    "model": "tiny-torch",
    "policy": "static",
    "min_replicas": 1,
    "max_replicas": 1,
    "startup_seconds": 10,
}
TARGET_TOKENS_LOSS = 0.05
TARGET_P50_ADDED_MS = 10.0

progress = progress_line("workload")  # the serving part of bench.workload


def replica_engine_config() -> EngineConfig:
    """What ``python -m inference_agent.serving.replica --engine torch --ignore-eos`` builds."""
    return EngineConfig(model=ModelConfig(seed=0), ignore_eos=True)


def p50(values: list[float]) -> float:
    """The upper median: the higher of the two middle values of an even count (nearest rank takes the lower one)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def replay_http(url: str, trace: list[TraceRequest], key: str) -> ReplayResult:
    """Each request at its arrival time, streamed from the front end as tenant ``key`` and read to the end."""
    latencies: list[float] = []
    tokens = [0]
    failed: list[int] = []
    lock = threading.Lock()
    client = httpx.Client(
        timeout=httpx.Timeout(300.0),
        limits=httpx.Limits(max_connections=1024),
        headers={"Authorization": f"Bearer {key}"},
    )
    t0 = time.perf_counter() + 0.2

    def request(r: TraceRequest) -> None:
        body = {"model": POOL["name"], "prompt": r.prompt, "max_tokens": r.generated_tokens, "stream": True}
        count, done = 0, False
        with client.stream("POST", f"{url}/v1/completions", json=body) as answer:
            for line in answer.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    count += 1
        finished = time.perf_counter()
        with lock:
            latencies.append(finished - (t0 + r.arrival_s))
            tokens[0] += count
            if answer.status_code != 200 or not done:
                failed.append(answer.status_code)

    threads = []
    for r in trace:
        time.sleep(max(0.0, t0 + r.arrival_s - time.perf_counter()))
        thread = threading.Thread(target=request, args=(r,), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    client.close()
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(trace)} requests through the front end failed: {sorted(failed)}")
    return ReplayResult(latencies, tokens[0], time.perf_counter() - t0, None)


def hop_added_ms(agent: AgentProcess, key: str, requests: int = 30) -> tuple[float, float]:
    """Median latency of a one-token streamed completion straight to the replica and through the front end."""
    assert agent.process is not None and agent.serve_url is not None
    (replica,) = [c for c in psutil.Process(agent.process.pid).children() if "serving.replica" in " ".join(c.cmdline())]
    argv = replica.cmdline()
    direct_url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
    replica_key = replica.environ()[REPLICA_KEY_ENV]  # the replica answers only who holds its key: the front end
    medians = []
    with httpx.Client(timeout=30) as client:
        for url, model, holds in ((direct_url, POOL["model"], replica_key), (agent.serve_url, POOL["name"], key)):
            took = []
            for _ in range(requests):
                started = time.perf_counter()
                body = {"model": model, "prompt": "hello", "max_tokens": 1, "stream": True}
                auth = {"Authorization": f"Bearer {holds}"}
                with client.stream("POST", f"{url}/v1/completions", json=body, headers=auth) as answer:
                    answer.raise_for_status()
                    for _line in answer.iter_lines():
                        pass
                took.append(time.perf_counter() - started)
            medians.append(p50(took) * 1000)
    return medians[0], medians[1]


def bench_tenant(server: ServerProcess, agent: AgentProcess) -> str:
    """A tenant for the replay, with a key and room for every request at once (the anonymous tenant's shared
    trickle would refuse most of them), once the agent's front end knows the key."""
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    api = f"{server.url}/api/v1/tenants"
    httpx.post(api, json={"name": "bench", "slo_class": "standard"}, headers=headers, timeout=10).raise_for_status()
    quota = {"max_concurrency": 1024}
    httpx.put(f"{api}/bench/quotas/{POOL['name']}", json=quota, headers=headers, timeout=10).raise_for_status()
    key: str = httpx.post(f"{api}/bench/keys", json={}, headers=headers, timeout=10).json()["key"]
    probe = {"model": POOL["name"], "prompt": "x", "max_tokens": 1}

    def known() -> bool:
        auth = {"Authorization": f"Bearer {key}"}
        return httpx.post(f"{agent.serve_url}/v1/completions", json=probe, headers=auth, timeout=30).status_code == 200

    wait_for(known, "the agent's front end knowing the bench tenant's key", 60)
    return key


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 180.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def ready_replicas(agent: AgentProcess) -> int:
    try:
        pools = httpx.get(f"{agent.metrics_url}/healthz", timeout=2).json().get("pools", {})
    except httpx.HTTPError:
        return 0
    return int(pools.get(POOL["name"], {}).get("ready", 0))


def start_node(server: ServerProcess, tmp: Path, node_id: str) -> AgentProcess:
    config = tmp / f"{node_id}.toml"
    config.write_text(PROFILE)
    return AgentProcess(
        collector=server.url,
        token=server.create_agent_token(node_id),
        node_id=node_id,
        spool_dir=tmp / f"spool-{node_id}",
        gpu_probe="none",
        serve_port=free_port(),
        config=config,
        log_path=tmp / f"{node_id}.log",
    ).start()


def run(trace: list[TraceRequest]) -> dict[str, Any]:
    """The serving figures (module docstring), keys prefixed ``serving_``."""
    progress("serving: in-process baseline (the replica's engine, called directly)")
    engine = ContinuousBatchingEngine(replica_engine_config())
    engine.warm_up()
    engine.start()
    try:
        direct = replay(engine, trace)
    finally:
        engine.stop()
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5"}
        with ServerProcess(f"sqlite:///{tmp}/bench.db", env=env, log_path=tmp / "server.log") as server:
            a = start_node(server, tmp, "bench-a")
            b: AgentProcess | None = None
            try:
                headers = {"Authorization": f"Bearer {server.admin_token}"}
                posted = httpx.post(f"{server.url}/api/v1/pools", json=POOL, headers=headers, timeout=10)
                posted.raise_for_status()
                to_ready_s = wait_for(lambda: ready_replicas(a) >= 1, "the pool's first replica ready")
                progress(f"serving: POST /pools → first replica ready in {to_ready_s:.1f} s")
                key = bench_tenant(server, a)
                direct_ms, hop_ms = hop_added_ms(a, key)
                progress(f"serving: one request alone, {direct_ms:.1f} ms direct, {hop_ms:.1f} ms via the front end")
                assert a.serve_url is not None
                progress(f"serving: replaying {len(trace)} requests through the front end")
                agent_cpu = psutil.Process(a.process.pid)  # type: ignore[union-attr]
                cpu_before = sum(agent_cpu.cpu_times()[:2])
                proxied = replay_http(a.serve_url, trace, key)
                agent_cpu_s = sum(agent_cpu.cpu_times()[:2]) - cpu_before
                b = start_node(server, tmp, "bench-b")
                time.sleep(2.0)  # pushing, and its report read
                a.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
                kill_to_ready_s = wait_for(lambda: ready_replicas(b) >= 1, "the replica failed over to bench-b")
                failover_s = recorded_failover_s(server.database_url)
                progress(f"serving: failover {failover_s:.1f} s detection → ready ({kill_to_ready_s:.1f} s from kill)")
            finally:
                for agent in (b, a):
                    if agent is not None:
                        agent.stop(timeout_s=30)
    direct_rate = direct.generated_tokens / direct.makespan_s
    proxied_rate = proxied.generated_tokens / proxied.makespan_s
    p50_added_ms = (p50(proxied.latencies_s) - p50(direct.latencies_s)) * 1000
    figures: dict[str, Any] = {
        "serving_tokens_per_second": round(proxied_rate, 1),
        "serving_baseline_tokens_per_second": round(direct_rate, 1),
        "serving_baseline": "the same engine called in-process, no HTTP, no front end",
        "serving_ratio": round(proxied_rate / direct_rate, 3),
        "serving_p50_ms": round(p50(proxied.latencies_s) * 1000, 1),
        "serving_baseline_p50_ms": round(p50(direct.latencies_s) * 1000, 1),
        "serving_p50_added_ms": round(p50_added_ms, 1),
        "serving_p99_ms": round(percentile(proxied.latencies_s, 99) * 1000, 1),
        "serving_baseline_p99_ms": round(percentile(direct.latencies_s, 99) * 1000, 1),
        "hop_alone_direct_ms": round(direct_ms, 2),
        "hop_alone_frontend_ms": round(hop_ms, 2),
        "hop_alone_added_ms": round(hop_ms - direct_ms, 2),
        # the agent process (front end, sampler, pusher; not its replica) during the replay: what the hop takes from
        # the cores the engine shares on a CPU node
        "agent_cpu_seconds_during_replay": round(agent_cpu_s, 2),
        "agent_cpu_share_of_machine": round(agent_cpu_s / (proxied.makespan_s * (os.cpu_count() or 1)), 3),
        "serving_generated_tokens": proxied.generated_tokens,
        "serving_baseline_generated_tokens": direct.generated_tokens,
        "pool_post_to_first_ready_s": round(to_ready_s, 2),
        "failover_detection_to_ready_s": round(failover_s, 2),
        "failover_kill_to_ready_s": round(kill_to_ready_s, 2),
    }
    figures["serving_target_met"] = (
        proxied_rate >= (1 - TARGET_TOKENS_LOSS) * direct_rate and figures["serving_p50_added_ms"] < TARGET_P50_ADDED_MS
    )
    progress(f"serving: {json.dumps(figures)}")
    return figures


def recorded_failover_s(database_url: str) -> float:
    """Detection → ready of the failover the server recorded, once it closed."""
    engine = make_engine(database_url)
    try:
        store = FailoverStore(engine)
        wait_for(lambda: any(f.ready_at is not None for f in store.since(0.0)), "the failover record closed", 30)
        closed = [f for f in store.since(0.0) if f.ready_at is not None]
        return closed[0].seconds(closed[0].ready_at or 0.0)
    finally:
        engine.dispose()
