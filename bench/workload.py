"""Workload benchmark (CONTRACT section 12): ``python -m bench.workload [--quick]``.

Replays a slice of the Azure LLM conversation trace (``data/traces/azure_conv_slice.csv``) through the built-in
text engine twice, with the same arrivals: continuous batching over the paged KV cache, and the static-batching
baseline of the same model (a batch runs, keeping its shape, until its last member finishes; each member reserves
KV for the model's whole context). Arrival times are compressed by ``--compression``; token counts are scaled to the
small model (context / 8 capped at 512, generated / 8 capped at 128, at least 1). Every request generates exactly its
scaled count (end-of-text is ignored), so both engines produce the same tokens. Progress goes to stderr; the last
stdout line is JSON.

Then the serving part (``bench/lib/serving_hop.py``): the same arrivals through a real agent's front end to the same
engine run as an engine profile's replica process, against that engine called in-process; the time from ``POST
/pools`` to the first ready replica; and a failover's detection → ready. ``--part engine`` or ``--part serving``
runs one part.
"""

from __future__ import annotations

import argparse
import json

import torch

from bench.lib.engine_replay import ReplayResult, replay
from bench.lib.progress import progress_line
from inference_agent.torch_runtime.config import ModelConfig
from inference_agent.torch_runtime.engine import (
    BatchingEngine,
    ContinuousBatchingEngine,
    EngineConfig,
    StaticBatchingEngine,
)
from replay.trace_load import AZURE_CONV_SLICE, TOKEN_SCALE, TraceRequest, load_trace
from wire.percentile import percentile

MAX_CONTEXT = 1024  # the benchmark model's context: 512 + 128 fit, and the static baseline reserves this much
MAX_BATCH_SIZE = 16
TARGET_RATIO = 2.0
TARGET_KV_EFFICIENCY = 0.9


progress = progress_line("workload")


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


def run_engine(name: str, engine: BatchingEngine, trace: list[TraceRequest]) -> ReplayResult:
    engine.warm_up()
    engine.start()
    try:
        progress(f"{name}: replaying {len(trace)} requests")
        result = replay(engine, trace)
    finally:
        engine.stop()
    rate, latency_ms = result.generated_tokens / result.makespan_s, percentile(result.latencies_s, 99) * 1000
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
        from bench.lib import serving_hop

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
        "p99_ms": round(percentile(continuous.latencies_s, 99) * 1000, 1),
        "baseline_tokens_per_second": round(baseline_tokens_per_second, 1),
        "baseline_p99_ms": round(percentile(static.latencies_s, 99) * 1000, 1),
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
        and percentile(continuous.latencies_s, 99) <= percentile(static.latencies_s, 99)
        and (continuous.kv_memory_efficiency or 0.0) >= TARGET_KV_EFFICIENCY
    )
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
