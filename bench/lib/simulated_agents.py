"""Simulated agents for the ingest and soak benchmarks: nodes of G GPUs pushing the wire format (CONTRACT section 5).

Each node samples every 500 ms like the real agent and pushes ``batch_ticks`` ticks per request: per tick one
sample per GPU (the five GPU metrics), one node sample (the two node metrics) and one pool sample (the five pool
metrics) of the node's pool (``POOL`` unless the plan names another). Bodies are built as ``inference_agent.pusher``
builds them (``inference_agent.pusher.push_body``: the compact encoding once the server offered it, unless the plan
says JSON; else JSON, gzip level 5), the node's report on every push and the inventory on every push until
one is acknowledged. Load is closed-loop: ``concurrency`` workers, each owning a disjoint set of nodes, send one push
at a time over a keep-alive ``httpx.AsyncClient`` until the time is up; a node never has two pushes in flight, so
its ``seq`` reaches the server in order, as from a real agent. The generator runs in its own process
(``run_in_process``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import multiprocessing
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from fleetpilot.launch import ServerProcess
from inference_agent.push_body import offers_compact, push_body

POOL = "llama-8b"
TICK_SECONDS = 0.5
GPU_MEMORY_TOTAL_BYTES = 80 * 1024**3
GPU_METRICS = 5
NODE_METRICS = 2
POOL_METRICS = 5


@dataclass(frozen=True)
class PushShape:
    """What one push carries: ``batch_ticks`` ticks of ``gpus`` device rows plus one node row and one pool row."""

    gpus: int
    batch_ticks: int

    @property
    def rows(self) -> int:
        return self.batch_ticks * (self.gpus + 2)

    @property
    def device_rows(self) -> int:
        return self.batch_ticks * self.gpus

    @property
    def values(self) -> int:
        """Metric values per push: 8 GPUs × 5 + 2 + 5 = 47 per tick."""
        return self.batch_ticks * (self.gpus * GPU_METRICS + NODE_METRICS + POOL_METRICS)


class SimulatedNode:
    """One node's sampler: realistic, slowly wandering readings and a per-node increasing ``seq``."""

    def __init__(self, node_id: str, gpus: int, seed: int, pool: str = POOL) -> None:
        self.node_id = node_id
        self.gpus = gpus
        self.pool = pool
        self.seq = 0
        self.registered = False
        self.offered = False  # the server's last answer offered the compact encoding
        self._rng = random.Random(seed)
        self._load = [self._rng.uniform(0.3, 0.9) for _ in range(gpus)]

    def tick(self, ts: float) -> list[dict[str, Any]]:
        """The samples of one 500 ms tick at ``ts``: GPUs 0..G-1, then the node, then the pool."""
        rows = [self._device_sample(ts, device) for device in range(self.gpus)]
        rows.append(self._sample(ts, None, None, self._node_metrics()))
        rows.append(self._sample(ts, None, self.pool, self._pool_metrics()))
        return rows

    def batch(self, shape: PushShape, now: float) -> dict[str, Any]:
        """One push body: the last ``batch_ticks`` ticks, the newest at ``now``; the inventory until registered."""
        samples: list[dict[str, Any]] = []
        for tick in range(shape.batch_ticks):
            samples.extend(self.tick(round(now - (shape.batch_ticks - 1 - tick) * TICK_SECONDS, 3)))
        body: dict[str, Any] = {"node_id": self.node_id, "samples": samples, "report": self.report(now)}
        if not self.registered:
            body["inventory"] = self.inventory()
        return body

    def report(self, now: float) -> dict[str, Any]:
        """The node's control state as the agent sends it with every push (wire.control.NodeReport): one ready
        replica of its pool per GPU."""
        return {"ts": now, "pools": {self.pool: {"ready": max(1, self.gpus), "startup_seconds": 40.0}}}

    def inventory(self) -> dict[str, Any]:
        gpus = [
            {"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{self.node_id}-{i}"}
            | {"memory_total_bytes": GPU_MEMORY_TOTAL_BYTES, "driver_version": "550.54.15"}
            for i in range(self.gpus)
        ]
        return {"hostname": self.node_id, "agent_version": "bench", "gpus": gpus}

    def _sample(self, ts: float, device: int | None, pool: str | None, metrics: dict[str, float]) -> dict[str, Any]:
        self.seq += 1
        return {"seq": self.seq, "ts": ts, "device": device, "pool": pool, "metrics": metrics, "extra": {}}

    def _device_sample(self, ts: float, device: int) -> dict[str, Any]:
        rng = self._rng
        load = min(1.0, max(0.0, self._load[device] + rng.gauss(0.0, 0.02)))
        self._load[device] = load
        metrics = {
            "gpu_utilization_ratio": round(load, 4),
            "gpu_memory_used_bytes": int(GPU_MEMORY_TOTAL_BYTES * (0.55 + 0.4 * load)),
            "gpu_memory_bandwidth_utilization_ratio": round(load * rng.uniform(0.5, 0.9), 4),
            "gpu_power_watts": round(90.0 + 600.0 * load + rng.uniform(-5.0, 5.0), 2),
            "gpu_temperature_celsius": round(35.0 + 45.0 * load + rng.uniform(-1.0, 1.0), 1),
        }
        return self._sample(ts, device, None, metrics)

    def _node_metrics(self) -> dict[str, float]:
        rng = self._rng
        return {
            "network_throughput_bytes_per_second": round(rng.uniform(2e7, 9e8), 1),
            "network_latency_seconds": round(rng.uniform(0.0004, 0.004), 6),
        }

    def _pool_metrics(self) -> dict[str, float]:
        rng = self._rng
        load = sum(self._load) / len(self._load) if self._load else rng.random()
        return {
            "request_rate_per_second": round(60.0 * load, 2),
            "queue_depth_requests": float(rng.randint(0, 12)),
            "token_throughput_per_second": round(4000.0 * load, 1),
            "request_latency_p99_seconds": round(0.4 + 2.5 * load, 3),
            "kv_cache_utilization_ratio": round(min(1.0, 0.2 + 0.75 * load), 4),
        }


@dataclass(frozen=True)
class LoadPlan:
    """Everything the generator process needs: where to push, as whom, how, and for how long; ``pools`` names the
    pool a node reports where it is not ``POOL``."""

    url: str
    tokens: dict[str, str]
    shape: PushShape
    concurrency: int
    warmup_s: float
    duration_s: float
    gzip: bool = True
    compact: bool = True  # send the compact encoding once offered, as the agent does
    request_timeout_s: float = 10.0
    seed: int = 1
    pools: dict[str, str] = field(default_factory=dict)


@dataclass
class LoadResult:
    """Totals over the whole run (for the stored-rows check) and figures over the measured window."""

    requests_total: int = 0
    accepted_total: int = 0
    duplicates_total: int = 0
    desired_total: int = 0  # answers that carried a desired state
    errors: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    accepted: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    window_s: float = 0.0
    cpu_s: float = 0.0


@dataclass(frozen=True)
class _Window:
    measure_from: float
    end: float


async def _push(client: httpx.AsyncClient, node: SimulatedNode, plan: LoadPlan, result: LoadResult, w: _Window) -> None:
    batch = node.batch(plan.shape, time.time())
    headers = {"authorization": f"Bearer {plan.tokens[node.node_id]}", "content-type": "application/json"}
    if plan.gzip:
        compact = plan.compact and node.offered
        content_type, body = push_body(
            node.node_id, batch["samples"], report=batch["report"], inventory=batch.get("inventory"), compact=compact
        )
        headers.update({"content-type": content_type, "content-encoding": "gzip"})
    else:
        body = json.dumps(batch, separators=(",", ":")).encode()
    started = time.perf_counter()
    try:
        response = await client.post("/api/v1/ingest", content=body, headers=headers)
        answer = response.json() if response.status_code == 200 else None
    except httpx.HTTPError as exc:
        result.errors[type(exc).__name__] += 1
        return
    done = time.perf_counter()
    result.requests_total += 1
    if answer is None:
        result.errors[str(response.status_code)] += 1
        return
    node.registered, node.offered = True, offers_compact(response)
    result.accepted_total += answer["accepted"]
    result.duplicates_total += answer["duplicates"]
    result.desired_total += answer.get("desired") is not None
    if w.measure_from <= done <= w.end:
        result.requests += 1
        result.accepted += answer["accepted"]
        result.latencies_ms.append((done - started) * 1000.0)


def _round_robin(nodes: list[SimulatedNode]) -> Iterator[SimulatedNode]:
    while True:
        yield from nodes


async def _worker(
    client: httpx.AsyncClient, nodes: list[SimulatedNode], plan: LoadPlan, result: LoadResult, w: _Window
) -> None:
    for node in _round_robin(nodes):
        if time.perf_counter() >= w.end:
            return
        await _push(client, node, plan, result, w)


async def run_load(plan: LoadPlan) -> LoadResult:
    """Drive the closed loop for ``warmup_s + duration_s``; requests completing after the warm-up are measured."""
    nodes = [
        SimulatedNode(node_id, plan.shape.gpus, plan.seed + i, plan.pools.get(node_id, POOL))
        for i, node_id in enumerate(sorted(plan.tokens))
    ]
    workers = max(1, min(plan.concurrency, len(nodes)))
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    result = LoadResult()
    cpu_before = time.process_time()
    async with httpx.AsyncClient(base_url=plan.url, limits=limits, timeout=plan.request_timeout_s) as client:
        start = time.perf_counter()
        window = _Window(start + plan.warmup_s, start + plan.warmup_s + plan.duration_s)
        await asyncio.gather(*(_worker(client, nodes[i::workers], plan, result, window) for i in range(workers)))
    result.window_s = plan.duration_s
    result.cpu_s = time.process_time() - cpu_before
    return result


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (it comes with uvicorn[standard]): less generator CPU per request."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _remember_missing_sniffio() -> None:
    """httpcore tries ``import sniffio`` on every lock it takes; without sniffio each try searches sys.path again,
    ~13% of the generator's CPU (py-spy). A ``None`` entry makes the miss instant; httpcore then assumes asyncio."""
    if importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def _child(plan: LoadPlan, sender: Any) -> None:
    _remember_missing_sniffio()
    with asyncio.Runner(loop_factory=_event_loop) as runner:
        sender.send("started")
        sender.send(runner.run(run_load(plan)))
    sender.close()


def run_in_process(plan: LoadPlan, on_start: Callable[[], None] = lambda: None) -> LoadResult:
    """Run ``run_load`` in a spawned process, so the generator has its own interpreter (and GIL, and core);
    ``on_start`` is called once the child has imported everything and is about to send its first push."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(plan, sender), name="bench-agents", daemon=True)
    process.start()
    sender.close()
    deadline = time.monotonic() + plan.warmup_s + plan.duration_s + plan.request_timeout_s + 60.0
    try:
        if _receive(receiver, deadline) != "started":
            raise RuntimeError("load generator did not start")
        on_start()
        result: LoadResult = _receive(receiver, deadline)
    finally:
        process.join(10.0)
        if process.is_alive():
            process.kill()
            process.join(5.0)
    return result


def _receive(receiver: Any, deadline: float) -> Any:
    if not receiver.poll(max(0.0, deadline - time.monotonic())):
        raise TimeoutError("load generator gave no answer in time")
    return receiver.recv()


def create_agent_tokens(server: ServerProcess, node_ids: list[str]) -> dict[str, str]:
    """One agent token per node through the REST API, as an operator would."""
    return {node_id: server.create_agent_token(node_id) for node_id in node_ids}
