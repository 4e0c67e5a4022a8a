"""A trace replayed into an engine in this process, open loop: each request submitted at its arrival time from its
own thread, its stream read to the end. The workload benchmark's engine part runs it against both batching engines,
and its serving hop against the replica's engine (the in-process baseline of the same arrivals through a front end).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from bench.lib.progress import progress_line
from inference_agent.torch_runtime.api import CompletionRequest
from inference_agent.torch_runtime.engine import BatchingEngine
from replay.trace_load import TraceRequest

progress = progress_line("workload")


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
