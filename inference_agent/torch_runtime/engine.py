"""The text engines: one loop (scheduler → swaps → model step → events) shared by continuous and static batching.

``ContinuousBatchingEngine`` and ``StaticBatchingEngine`` differ only in their ``SchedulingPolicy``; the model, the
paged KV cache, the block manager and the sampling (greedy, so results are deterministic) are the same code.
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import torch

from inference_agent.torch_runtime.api import CompletionRequest, EngineStats, FinishReason, TokenEvent
from inference_agent.torch_runtime.blocks import BlockManager
from inference_agent.torch_runtime.config import ModelConfig
from inference_agent.torch_runtime.kv_cache import PagedKVCache
from inference_agent.torch_runtime.model import build_model, pick_device, torch_dtype
from inference_agent.torch_runtime.scheduler import (
    ContinuousPolicy,
    SchedulerKnobs,
    SchedulingPolicy,
    SeqView,
    StaticPolicy,
    StepContext,
    StepKind,
    StepPlan,
)
from inference_agent.torch_runtime.sequence import SeqStatus, Sequence, StepRecord
from inference_agent.torch_runtime.tokenizer import EOS_ID, encode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    device: str | None = None  # compute device; None: "cuda" when available, else "cpu"
    kv_devices: tuple[str, ...] = ()  # one KV pool per entry; (): every CUDA GPU on CUDA, else the compute device
    device_blocks: int = 512  # KV blocks per device pool (512 × 16 tokens × 8 KiB = 64 MiB at the defaults)
    host_blocks: int = 256  # the host-memory tier that cold sequences are swapped to (32 MiB)
    block_size: int = 16
    max_batch_size: int = 16
    buckets: tuple[int, ...] = (512, 1024, 2048, 4096)
    batch_timeout_s: float = 0.05
    ignore_eos: bool = False  # generate exactly max_tokens (the benchmark's fixed output lengths)
    step_log_size: int = 10_000

    def knobs(self, *, reserve_tokens: int = 0, pad_finished: bool = True) -> SchedulerKnobs:
        return SchedulerKnobs(
            self.max_batch_size, self.buckets, self.batch_timeout_s, self.block_size, reserve_tokens, pad_finished
        )


class BatchingEngine:
    """A ``TextEngine``: its own loop thread runs one planned step at a time; callers stream from per-request
    queues. Without ``start()``, ``run_step()`` drives it by hand (tests, warm-up)."""

    def __init__(self, config: EngineConfig, policy: SchedulingPolicy, *, clock: Callable[[], float] = time.monotonic):
        self.config, self._policy, self._clock = config, policy, clock
        device = pick_device(config.device)
        kv_devices = [torch.device(d) for d in config.kv_devices] or _default_kv_devices(device)
        self.blocks = BlockManager(config.block_size, [config.device_blocks] * len(kv_devices), config.host_blocks)
        self.model = build_model(config.model, device)
        m = config.model
        self.cache = PagedKVCache(
            n_layers=m.n_layers, n_heads=m.n_heads, head_dim=m.head_dim, block_size=config.block_size,
            pool_blocks=[config.device_blocks] * len(kv_devices) + [config.host_blocks],
            pool_devices=[*kv_devices, torch.device("cpu")], dtype=torch_dtype(m.dtype),
        )  # fmt: skip
        self._queues: dict[SeqStatus, dict[str, Sequence]] = {s: {} for s in SeqStatus if s is not SeqStatus.FINISHED}
        self._inbox: queue.SimpleQueue[Sequence | str] = queue.SimpleQueue()  # new sequences, or ids to abort
        self._live: set[str] = set()
        self._live_lock = threading.Lock()
        self._step_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._step = 0
        self._counts = {"prompt_tokens": 0, "generated_tokens": 0, "finished_requests": 0}
        self._kv_ratio_sum, self._kv_ratio_steps = 0.0, 0
        self._kv_shares: dict[str, float] = {}  # tenant → its share of the device KV blocks under contention
        self._warm_ups = itertools.count()
        self.log: deque[StepRecord] = deque(maxlen=config.step_log_size)
        self._snapshot = self._stats_now()

    # --- TextEngine --------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the loop; whatever has not finished ends with ``FinishReason.ABORT``."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._step_lock:
            self._drain_inbox()
            for status in (SeqStatus.WAITING, SeqStatus.RUNNING, SeqStatus.SWAPPED):
                for seq in list(self._queues[status].values()):
                    self._retire(seq, FinishReason.ABORT)
            self._snapshot = self._stats_now()

    def warm_up(self) -> None:
        """Run one short request through prefill and decode (outside the stats), so the first real one is warm."""
        request = CompletionRequest(f"__warm_up_{next(self._warm_ups)}", "warm-up", max_tokens=4)
        events = self._enqueue(request, counted=False)
        while True:
            while self._thread is None and events.empty():  # not started: drive the loop from here
                self.run_step()
            if events.get().finish_reason is not None:
                return

    def submit(self, request: CompletionRequest) -> Iterator[TokenEvent]:
        """Validate and queue ``request`` now; the iterator yields its tokens (closing it early aborts it). Its
        ``kv_share`` becomes its tenant's KV budget from now on (the latest request says what holds)."""
        events = self._enqueue(request, counted=True)
        if request.kv_share is None:
            self._kv_shares.pop(request.tenant, None)
        else:
            self._kv_shares[request.tenant] = request.kv_share
        return self._stream(request.request_id, events)

    def abort(self, request_id: str) -> None:
        self._inbox.put(request_id)
        self._wake.set()

    def stats(self) -> EngineStats:
        """The snapshot taken after the last step, with requests submitted since then counted as waiting."""
        snapshot = self._snapshot
        if self._step_lock.acquire(blocking=False):  # between steps: a fresh count is cheap
            try:
                snapshot = self._snapshot = self._stats_now()
            finally:
                self._step_lock.release()
        return replace(snapshot, waiting=snapshot.waiting + self._inbox.qsize())

    def _stats_now(self) -> EngineStats:
        q = self._queues
        return EngineStats(
            running=len(q[SeqStatus.RUNNING]), waiting=len(q[SeqStatus.WAITING]), swapped=len(q[SeqStatus.SWAPPED]),
            kv_blocks_total=self.blocks.total_device_blocks(), kv_blocks_used=self.blocks.used_device_blocks(),
            kv_fragmentation_ratio=self.blocks.fragmentation(), swaps_out=self.blocks.swaps_out,
            swaps_in=self.blocks.swaps_in, **self._counts,
        )  # fmt: skip

    def kv_memory_efficiency(self) -> float | None:
        """Used over allocated KV token slots, averaged over the steps that held any; None before the first."""
        return self._kv_ratio_sum / self._kv_ratio_steps if self._kv_ratio_steps else None

    # --- requests ----------------------------------------------------------------------------------------------
    def _enqueue(self, request: CompletionRequest, *, counted: bool) -> queue.SimpleQueue[TokenEvent]:
        prompt_ids = encode(request.prompt)
        self._validate(request, len(prompt_ids))
        with self._live_lock:
            if request.request_id in self._live:
                raise ValueError(f"request_id {request.request_id!r} is already in flight")
            self._live.add(request.request_id)
        room = self._capacity() - len(prompt_ids)  # max_tokens beyond the context is cut: finish reason "length"
        seq = Sequence(request, prompt_ids, min(request.max_tokens, room), self._clock(), counted=counted)
        self._inbox.put(seq)
        self._wake.set()
        return seq.events

    def _capacity(self) -> int:
        """Tokens one sequence may reach: the model's context, or the device pools if smaller."""
        return min(self.config.model.max_context, self.blocks.total_device_blocks() * self.config.block_size)

    def _validate(self, request: CompletionRequest, prompt_tokens: int) -> None:
        """A request the engine can never run is refused up front, naming the field."""
        capacity = self._capacity()
        if request.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {request.max_tokens}")
        if prompt_tokens >= capacity:
            raise ValueError(f"prompt is {prompt_tokens} tokens; this engine holds {capacity - 1} plus one generated")

    def _stream(self, request_id: str, events: queue.SimpleQueue[TokenEvent]) -> Iterator[TokenEvent]:
        done = False
        try:
            while not done:
                event = events.get()
                done = event.finish_reason is not None
                yield event
        finally:
            if not done:
                self.abort(request_id)

    # --- the loop ----------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                record = self.run_step()
            except Exception:  # a failed step must not kill the replica: end what was in it, keep serving
                log.exception("engine step failed; aborting the requests in flight")
                self._abort_in_flight()
                continue
            if record.kind is StepKind.IDLE:
                wait_until = record.wait_until_s
                self._wake.wait(None if wait_until is None else max(0.0, wait_until - self._clock()))

    def run_step(self) -> StepRecord:
        """Plan one step from the current state and execute it; answers what ran."""
        with self._step_lock:
            now = self._clock()
            self._drain_inbox()
            plan = self._policy.plan(self._context(now))
            started = time.perf_counter()
            with torch.inference_mode():
                self._execute(plan)
            return self._record(plan, now, time.perf_counter() - started)

    def _drain_inbox(self) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Sequence):
                self._queues[SeqStatus.WAITING][item.seq_id] = item
                self._counts["prompt_tokens"] += len(item.prompt_ids) if item.counted else 0
            else:
                self._abort_id(item)

    def _context(self, now: float) -> StepContext:
        def views(status: SeqStatus) -> tuple[SeqView, ...]:
            group = self._queues[status].values()
            if status is SeqStatus.WAITING:
                return tuple(s.view() for s in group)
            return tuple(s.view(len(self.blocks.block_table(s.seq_id))) for s in group)

        total = self.blocks.total_device_blocks()
        budgets = {tenant: math.floor(share * total) for tenant, share in list(self._kv_shares.items())}
        return StepContext(
            now, views(SeqStatus.WAITING), views(SeqStatus.RUNNING), views(SeqStatus.SWAPPED),
            views(SeqStatus.HOLDING), self.blocks.free_device_blocks(), self.blocks.free_host_blocks(), budgets,
        )  # fmt: skip

    # --- executing a plan --------------------------------------------------------------------------------------
    def _execute(self, plan: StepPlan) -> None:
        self._step += 1
        for seq_id in plan.abort:
            self._abort_id(seq_id)
        for seq_id in plan.swap_out:
            self.cache.copy(self.blocks.swap_out(seq_id))
            self._move(seq_id, SeqStatus.RUNNING, SeqStatus.SWAPPED)
        for seq_id in plan.swap_in:
            self.cache.copy(self.blocks.swap_in(seq_id))
            self._move(seq_id, SeqStatus.SWAPPED, SeqStatus.RUNNING)
        if plan.kind is StepKind.PREFILL:
            self._prefill([self._move(i, SeqStatus.WAITING, SeqStatus.RUNNING) for i in plan.prefill])
        elif plan.kind is StepKind.DECODE:
            self._decode(plan.decode, plan.pad)

    def _move(self, seq_id: str, source: SeqStatus, target: SeqStatus) -> Sequence:
        seq = self._queues[source].pop(seq_id)
        seq.status = target
        self._queues[target][seq_id] = seq
        return seq

    def _prefill(self, seqs: list[Sequence]) -> None:
        reserve = self._policy.knobs.reserve_tokens
        for seq in seqs:
            self.blocks.allocate(seq.seq_id, len(seq.prompt_ids), reserve_tokens=reserve)
            seq.cached_tokens = len(seq.prompt_ids)
        tables = [self.blocks.block_table(s.seq_id) for s in seqs]
        logits = self.model.prefill([s.prompt_ids for s in seqs], tables, self.cache)
        self._accept(seqs, logits)

    def _decode(self, ids: tuple[str, ...], pad: tuple[str, ...]) -> None:
        """One token for each sequence in ``ids``; ``pad`` rows (finished members of a static batch) are computed
        at their last slot, rewriting finished K/V, and their outputs dropped."""
        seqs = [self._queues[SeqStatus.RUNNING][i] for i in ids]
        pads = [self._queues[SeqStatus.HOLDING][i] for i in pad]
        for seq in seqs:
            self.blocks.append(seq.seq_id)
        rows = seqs + pads
        positions = [s.cached_tokens for s in seqs] + [s.cached_tokens - 1 for s in pads]
        tables = [self.blocks.block_table(s.seq_id) for s in rows]
        logits = self.model.decode([s.generated[-1] for s in rows], positions, tables, self.cache)
        for seq in seqs:
            seq.cached_tokens += 1
        self._accept(seqs, logits[: len(seqs)])

    def _accept(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        """Greedy sampling (argmax: the same prompt gives the same tokens), then stream and retire."""
        for seq, token in zip(seqs, logits.argmax(dim=-1).tolist(), strict=True):
            seq.generated.append(token)
            seq.last_scheduled = self._step
            self.blocks.touch(seq.seq_id, self._step)
            self._counts["generated_tokens"] += seq.counted
            if token == EOS_ID and not self.config.ignore_eos:
                self._retire(seq, FinishReason.STOP, token)
            elif len(seq.generated) >= seq.max_new_tokens:
                self._retire(seq, FinishReason.LENGTH, token)
            else:
                seq.emit(token, None)

    def _retire(self, seq: Sequence, reason: FinishReason, token: int | None = None) -> None:
        """End a sequence: its last event, then its blocks (now, or with its static batch)."""
        self._queues[seq.status].pop(seq.seq_id, None)
        if token is None:
            seq.abort()
        else:
            seq.emit(token, reason)
        self._counts["finished_requests"] += seq.counted and reason is not FinishReason.ABORT
        with self._live_lock:
            self._live.discard(seq.seq_id)
        keep = not self._policy.release_on_finish and reason is not FinishReason.ABORT
        if keep and seq.seq_id in self.blocks:
            seq.status = SeqStatus.HOLDING
            self._queues[SeqStatus.HOLDING][seq.seq_id] = seq
        elif seq.seq_id in self.blocks:
            self.blocks.free(seq.seq_id)
        if not self._queues[SeqStatus.RUNNING]:  # the batch is over: a static batch releases everything now
            for held in self._queues[SeqStatus.HOLDING].values():
                self.blocks.free(held.seq_id)
            self._queues[SeqStatus.HOLDING].clear()

    def _abort_id(self, seq_id: str) -> None:
        for status in (SeqStatus.WAITING, SeqStatus.RUNNING, SeqStatus.SWAPPED):
            if seq_id in self._queues[status]:
                self._retire(self._queues[status][seq_id], FinishReason.ABORT)

    def _abort_in_flight(self) -> None:
        with self._step_lock:
            for status in (SeqStatus.RUNNING, SeqStatus.SWAPPED):
                for seq in list(self._queues[status].values()):
                    self._retire(seq, FinishReason.ABORT)

    def _record(self, plan: StepPlan, now: float, duration_s: float) -> StepRecord:
        used, allocated = self.blocks.used_slots(), self.blocks.allocated_slots()
        self._snapshot = self._stats_now()
        if allocated and plan.kind is not StepKind.IDLE:
            self._kv_ratio_sum += used / allocated
            self._kv_ratio_steps += 1
        record = StepRecord(
            self._step, now, plan.kind, plan.reason, plan.prefill, plan.decode, plan.pad, plan.swap_out,
            plan.swap_in, used, allocated, duration_s, plan.wait_until_s,
        )  # fmt: skip
        if plan.kind is not StepKind.IDLE:
            self.log.append(record)
        return record


def _default_kv_devices(compute: torch.device) -> list[torch.device]:
    """Every GPU holds a pool when computing on CUDA (peers before host memory); on CPU the one device pool."""
    if compute.type == "cuda":
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [compute]


class ContinuousBatchingEngine(BatchingEngine):
    """Iteration-level scheduling over a paged KV cache: requests join and leave the batch at every step."""

    def __init__(self, config: EngineConfig | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        config = config or EngineConfig()
        super().__init__(config, ContinuousPolicy(config.knobs()), clock=clock)


class StaticBatchingEngine(BatchingEngine):
    """The naive baseline: a batch forms, runs (keeping its shape) until its last member finishes, and only then
    does the next batch start; each member reserves KV for ``reserve_tokens`` (default: the model's context)."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        reserve_tokens: int | None = None,
        pad_finished: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        config = config or EngineConfig()
        reserve = config.model.max_context if reserve_tokens is None else reserve_tokens
        knobs = config.knobs(reserve_tokens=reserve, pad_finished=pad_finished)
        if knobs.admit_blocks(1) > config.device_blocks * max(1, len(config.kv_devices)):
            raise ValueError(f"reserve_tokens {reserve} exceeds the device KV pool ({config.device_blocks} blocks)")
        super().__init__(config, StaticPolicy(knobs), clock=clock)
