"""Workload benchmark (CONTRACT section 12): ``python -m bench.workload [--quick]``.

Replays a slice of the Azure LLM conversation trace (``data/traces/azure_conv_slice.csv``) through the built-in
text engine twice, with the same arrivals: continuous batching over the paged KV cache, and the static-batching
baseline of the same model (a batch runs, keeping its shape, until its last member finishes; each member reserves
KV for the model's whole context). Arrival times are compressed by ``--compression``; token counts are scaled to the
small model (context / 8 capped at 512, generated / 8 capped at 128, at least 1). Every request generates exactly its
scaled count (end-of-text is ignored), so both engines produce the same tokens. Progress goes to stderr; the last
stdout line is JSON.

Then the serving part (``bench/serving_hop.py``): the same arrivals through a real agent's front end to the same
engine run as an engine profile's replica process, against that engine called in-process; the time from ``POST
/pools`` to the first ready replica; and a failover's detection → ready. ``--part engine`` or ``--part serving``
runs one part.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from dataclasses import dataclass

import torch

from fleetpilot.trace_load import AZURE_CONV_SLICE, TOKEN_SCALE, TraceRequest, load_trace
from inference_agent.torch_runtime.api import CompletionRequest
from inference_agent.torch_runtime.config import ModelConfig
from inference_agent.torch_runtime.engine import (
    BatchingEngine,
    ContinuousBatchingEngine,
    EngineConfig,
    StaticBatchingEngine,
)

MAX_CONTEXT = 1024  # the benchmark model's context: 512 + 128 fit, and the static baseline reserves this much
MAX_BATCH_SIZE = 16
TARGET_RATIO = 2.0
TARGET_KV_EFFICIENCY = 0.9


def progress(message: str) -> None:
    print(f"[bench.workload] {message}", file=sys.stderr, flush=True)


def engine_config() -> EngineConfig:
    """Both engines get the same KV memory: enough for the static baseline's full-context reservations of a whole
    batch (16 × 1,024 tokens = 1,024 blocks of 16, 128 MiB), so the baseline is never short of memory."""
    return EngineConfig(
        model=ModelConfig(max_context=MAX_CONTEXT),
        device_blocks=MAX_BATCH_SIZE * MAX_CONTEXT // 16,
        host_blocks=256,
        block_size=16,
        max_batch_size=MAX_BATCH_SIZE,
        ignore_eos=True,
    )


@dataclass
class ReplayResult:
    latencies_s: list[float]
    generated_tokens: int
    makespan_s: float
    kv_memory_efficiency: float | None


def replay(engine: BatchingEngine, trace: list[TraceRequest]) -> ReplayResult:
    """Submit each request at its arrival time from its own thread and read its stream to the end."""
    latencies: list[float] = []
    tokens = [0]
    lock = threading.Lock()
    t0 = time.perf_counter() + 0.2

    def client(index: int, request: TraceRequest) -> None:
        prompt = request.prompt
        stream = engine.submit(CompletionRequest(f"req-{index}", prompt, request.generated_tokens))
        count = sum(1 for _ in stream)
        done = time.perf_counter()
        with lock:
            latencies.append(done - (t0 + request.arrival_s))
            tokens[0] += count

    threads = []
    for index, request in enumerate(trace):
        time.sleep(max(0.0, t0 + request.arrival_s - time.perf_counter()))
        thread = threading.Thread(target=client, args=(index, request), daemon=True)
        thread.start()
        threads.append(thread)
    for number, thread in enumerate(threads):
        thread.join()
        if number % 100 == 99:
            progress(f"  {number + 1}/{len(threads)} requests done, {time.perf_counter() - t0:.1f} s")
    makespan = time.perf_counter() - t0
    return ReplayResult(latencies, tokens[0], makespan, engine.kv_memory_efficiency())


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def run_engine(name: str, engine: BatchingEngine, trace: list[TraceRequest]) -> ReplayResult:
    engine.warm_up()
    engine.start()
    try:
        progress(f"{name}: replaying {len(trace)} requests")
        result = replay(engine, trace)
    finally:
        engine.stop()
    rate, latency_ms = result.generated_tokens / result.makespan_s, p99(result.latencies_s) * 1000
    progress(
        f"{name}: {rate:.0f} tokens/s, p99 {latency_ms:.0f} ms, "
        f"makespan {result.makespan_s:.1f} s, KV efficiency {result.kv_memory_efficiency or 0:.3f}"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workload", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first 60 requests instead of 250 (under 60 s)")
    parser.add_argument("--compression", type=float, default=8.0, help="trace time / replay time (default 8)")
    parser.add_argument("--part", choices=["all", "engine", "serving"], default="all")
    args = parser.parse_args(argv)
    trace = load_trace(AZURE_CONV_SLICE, 60 if args.quick else 250, args.compression)
    offered = sum(r.generated_tokens for r in trace) / max(trace[-1].arrival_s, 1e-9)
    progress(f"{len(trace)} requests over {trace[-1].arrival_s:.1f} s (compression {args.compression}×), "
             f"offered {offered:.0f} generated tokens/s; torch threads {torch.get_num_threads()}")  # fmt: skip
    figures: dict[str, object] = {"bench": "workload", "requests": len(trace), "compression": args.compression}
    if args.part in ("all", "engine"):
        figures.update(engine_part(trace, offered))
    if args.part in ("all", "serving"):
        from bench import serving_hop

        figures.update(serving_hop.run(trace))
    print(json.dumps(figures))
    return 0


def engine_part(trace: list[TraceRequest], offered: float) -> dict[str, object]:
    """Continuous against static batching (CONTRACT section 12's keys)."""
    config = engine_config()
    continuous = run_engine("continuous", ContinuousBatchingEngine(config), trace)
    static = run_engine("static", StaticBatchingEngine(config), trace)
    tokens_per_second = continuous.generated_tokens / continuous.makespan_s
    baseline_tokens_per_second = static.generated_tokens / static.makespan_s
    figures: dict[str, object] = {
        "token_scale": TOKEN_SCALE,
        "offered_tokens_per_second": round(offered, 1),
        "tokens_per_second": round(tokens_per_second, 1),
        "p99_ms": round(p99(continuous.latencies_s) * 1000, 1),
        "baseline_tokens_per_second": round(baseline_tokens_per_second, 1),
        "baseline_p99_ms": round(p99(static.latencies_s) * 1000, 1),
        "baseline": "static batching, same model and KV memory, full-context reservation",
        "ratio": round(tokens_per_second / baseline_tokens_per_second, 2),
        "kv_memory_efficiency": round(continuous.kv_memory_efficiency or 0.0, 3),
        "baseline_kv_memory_efficiency": round(static.kv_memory_efficiency or 0.0, 3),
        "generated_tokens": continuous.generated_tokens,
        "max_batch_size": MAX_BATCH_SIZE,
        "device": str(config.device or ("cuda" if torch.cuda.is_available() else "cpu")),
    }
    figures["target_met"] = (
        tokens_per_second >= TARGET_RATIO * baseline_tokens_per_second
        and p99(continuous.latencies_s) <= p99(static.latencies_s)
        and (continuous.kv_memory_efficiency or 0.0) >= TARGET_KV_EFFICIENCY
    )
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
