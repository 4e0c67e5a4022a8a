"""Which sequences run at the next step: continuous (iteration-level) batching, and the static baseline.

Pure decisions: the engine passes a frozen snapshot (with ``now``) and executes the returned plan. Each step is
either a prefill step (new prompts, grouped by length bucket) or a decode step (one token for every running
sequence); swaps between device and host memory ride along with either.

**Tenant KV budgets** (continuous batching): a tenant may hold more device blocks than its budget while they are
free, but it pays first when they are not — work-conserving, like the guaranteed share it stands for. Its running
sequences are the first swapped out to let others grow; when the best-ranked prompt of a tenant within its budget
does not fit, over-budget sequences are swapped out to make room; and an over-budget tenant's swapped sequences
neither come back nor hold prompts back while a tenant within its budget waits. Worked: 100 blocks, budgets
``lc`` 30 and ``batch`` 70, ``batch`` running on 95 and an ``lc`` prompt needing 4 → ``batch``'s coldest
sequences go to host memory until 4 blocks are spare, and the prompt is prefilled at the next step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol


class StepKind(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    IDLE = "idle"


class StepReason(StrEnum):
    JOIN_RUNNING = "JoinRunning"  # prompts prefilled while others decode: they join the batch at the next step
    BATCH_FULL = "BatchFull"  # the prefill batch reached max batch size or the free blocks
    BATCH_TIMEOUT = "BatchTimeout"  # the oldest waiting prompt waited the batch timeout
    WAIT_FOR_BATCH = "WaitForBatch"  # nothing runs; waiting for more prompts until the timeout
    DECODE = "Decode"
    NOTHING_TO_DO = "NothingToDo"


@dataclass(frozen=True)
class SeqView:
    """What the scheduler knows of one sequence."""

    seq_id: str
    priority: int  # lower first (api.Priority)
    arrival_s: float
    num_tokens: int  # waiting: prompt tokens; running/swapped: tokens in the KV cache
    blocks: int = 0  # blocks it holds now (device or host)
    last_scheduled: int = -1  # the last step it ran at
    tenant: str = "default"

    @property
    def rank(self) -> tuple[int, float, str]:
        return (self.priority, self.arrival_s, self.seq_id)


@dataclass(frozen=True)
class SchedulerKnobs:
    max_batch_size: int = 16
    buckets: tuple[int, ...] = (512, 1024, 2048, 4096)
    batch_timeout_s: float = 0.05
    block_size: int = 16
    reserve_tokens: int = 0  # static baseline: KV slots reserved per sequence at admission (0: on demand)
    pad_finished: bool = True  # static baseline: the batch keeps its shape, finished rows computed as padding

    def bucket(self, num_tokens: int) -> int:
        """The smallest bucket holding a prompt: 700 tokens → 1024; beyond the last bucket → the last."""
        return next((b for b in self.buckets if num_tokens <= b), self.buckets[-1])

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def admit_blocks(self, prompt_tokens: int) -> int:
        return self.blocks_for(max(prompt_tokens, self.reserve_tokens))


@dataclass(frozen=True)
class StepContext:
    now_s: float
    waiting: tuple[SeqView, ...] = ()
    running: tuple[SeqView, ...] = ()
    swapped: tuple[SeqView, ...] = ()
    holding: tuple[SeqView, ...] = ()  # static batching: finished members still holding their slot and blocks
    free_device_blocks: int = 0
    free_host_blocks: int = 0
    kv_budgets: Mapping[str, int] = field(default_factory=dict)  # tenant → device blocks; absent: no budget


@dataclass(frozen=True)
class StepPlan:
    kind: StepKind
    reason: StepReason
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    pad: tuple[str, ...] = ()  # decoded along as padding, outputs dropped (finished members of a static batch)
    swap_out: tuple[str, ...] = ()  # executed before the step, coldest first
    swap_in: tuple[str, ...] = ()
    abort: tuple[str, ...] = ()  # cannot grow and cannot be swapped out (device and host both full)
    wait_until_s: float | None = None  # IDLE: when to plan again if nothing arrives


@dataclass
class _Budget:
    """Free device and host blocks left while a plan is being built, and each tenant's device blocks."""

    free: int
    host_free: int
    held: Counter[str]
    budgets: Mapping[str, int]
    reserved_growth: int = 0
    swap_out: list[str] = field(default_factory=list)
    abort: list[str] = field(default_factory=list)

    @property
    def spare(self) -> int:
        return self.free - self.reserved_growth

    def over(self, tenant: str, adding: int = 0) -> bool:
        """Whether ``tenant`` holds (or would, with ``adding`` more blocks) more than its budget."""
        cap = self.budgets.get(tenant)
        return cap is not None and self.held[tenant] + adding > cap

    def evict(self, victim: SeqView, block_size: int, *, to_host: bool) -> None:
        self.reserved_growth -= _needs_block(victim, block_size)
        self.free += victim.blocks
        self.held[victim.tenant] -= victim.blocks
        if to_host:
            self.host_free -= victim.blocks
            self.swap_out.append(victim.seq_id)
        else:
            self.abort.append(victim.seq_id)


def _needs_block(view: SeqView, block_size: int) -> int:
    """1 when the next decoded token starts a new block: 32 tokens in 2 blocks of 16 → the 33rd needs a third."""
    return 1 if view.num_tokens + 1 > view.blocks * block_size else 0


def _coldest_first(views: Iterable[SeqView]) -> list[SeqView]:
    """Least recently scheduled first; on a tie the least important (higher priority value, later arrival)."""
    return sorted(views, key=lambda v: (v.last_scheduled, -v.priority, -v.arrival_s, v.seq_id))


def _make_room_for_growth(running: list[SeqView], ctx: StepContext, knobs: SchedulerKnobs) -> _Budget:
    """Swap out the coldest running sequences, over-budget tenants' first, until every remaining one can write its
    next token."""
    held: Counter[str] = Counter()
    for view in running:
        held[view.tenant] += view.blocks
    budget = _Budget(ctx.free_device_blocks, ctx.free_host_blocks, held, ctx.kv_budgets)
    budget.reserved_growth = sum(_needs_block(v, knobs.block_size) for v in running)
    while budget.spare < 0 and running:
        victim = min(_coldest_first(running), key=lambda v: not budget.over(v.tenant))  # stable: coldest first
        running.remove(victim)
        # nowhere to put it, or it alone outgrows the device pools: abort
        budget.evict(victim, knobs.block_size, to_host=victim.blocks <= budget.host_free and bool(running))
    return budget


def _make_room_for_protected(
    waiting: Sequence[SeqView], running: list[SeqView], budget: _Budget, knobs: SchedulerKnobs
) -> None:
    """Swap out over-budget sequences, coldest first, until the best-ranked prompt of a tenant within its budget
    fits (as far as host memory allows)."""
    protected = [w for w in waiting if not budget.over(w.tenant, knobs.admit_blocks(w.num_tokens))]
    if not protected or not budget.budgets:
        return
    need = knobs.admit_blocks(min(protected, key=lambda v: v.rank).num_tokens)
    for victim in _coldest_first([v for v in running if budget.over(v.tenant)]):
        if budget.spare >= need:
            return
        if budget.over(victim.tenant) and victim.blocks <= budget.host_free:
            running.remove(victim)
            budget.evict(victim, knobs.block_size, to_host=True)


def _deferred(ctx: StepContext, budget: _Budget, knobs: SchedulerKnobs) -> set[str]:
    """Swapped sequences that wait while a tenant within its budget waits: those whose tenant would exceed it."""
    if not any(not budget.over(w.tenant, knobs.admit_blocks(w.num_tokens)) for w in ctx.waiting):
        return set()
    return {v.seq_id for v in ctx.swapped if budget.over(v.tenant, v.blocks)}


def _pick_swap_in(swapped: Sequence[SeqView], slots: int, budget: _Budget, knobs: SchedulerKnobs) -> list[str]:
    """Swapped sequences come back in rank order while batch slots and blocks (with their next token) allow."""
    chosen: list[str] = []
    for view in sorted(swapped, key=lambda v: v.rank):
        need = view.blocks + _needs_block(view, knobs.block_size)
        if len(chosen) >= slots or need > budget.spare:
            break
        budget.free -= view.blocks
        budget.reserved_growth += _needs_block(view, knobs.block_size)
        chosen.append(view.seq_id)
    return chosen


def _pick_prefill(
    waiting: Sequence[SeqView], slots: int, spare_blocks: int, knobs: SchedulerKnobs, budget: _Budget | None = None
) -> tuple[list[SeqView], bool]:
    """The best-ranked waiting prompts of the head's length bucket that fit, those of tenants within their KV
    budget first; ``True`` when blocks or slots ran out (the batch is as full as it can get)."""

    def order(v: SeqView) -> tuple[bool, tuple[int, float, str]]:
        return (budget is not None and budget.over(v.tenant, knobs.admit_blocks(v.num_tokens)), v.rank)

    ordered = sorted(waiting, key=order)
    if not ordered or slots <= 0:
        return [], slots <= 0
    bucket = knobs.bucket(ordered[0].num_tokens)
    chosen: list[SeqView] = []
    for view in ordered:
        if knobs.bucket(view.num_tokens) != bucket:
            continue
        need = knobs.admit_blocks(view.num_tokens)
        if len(chosen) == slots or need > spare_blocks:
            return chosen, True  # head-of-line: a later prompt may not overtake one that does not fit
        spare_blocks -= need
        chosen.append(view)
    return chosen, len(chosen) == slots


def _prefill_or_wait(chosen: list[SeqView], full: bool, busy: bool, now_s: float, knobs: SchedulerKnobs) -> StepPlan:
    """Prefill now when others run (join), the batch is full, or the oldest waited the timeout; else wait."""
    ids = tuple(v.seq_id for v in chosen)
    deadline = min(v.arrival_s for v in chosen) + knobs.batch_timeout_s
    if busy:
        return StepPlan(StepKind.PREFILL, StepReason.JOIN_RUNNING, prefill=ids)
    if full:
        return StepPlan(StepKind.PREFILL, StepReason.BATCH_FULL, prefill=ids)
    if now_s >= deadline:
        return StepPlan(StepKind.PREFILL, StepReason.BATCH_TIMEOUT, prefill=ids)
    return StepPlan(StepKind.IDLE, StepReason.WAIT_FOR_BATCH, wait_until_s=deadline)


def schedule_continuous(ctx: StepContext, knobs: SchedulerKnobs) -> StepPlan:
    """Iteration-level scheduling: every step, sequences may leave (finished), come back (swap in) or join
    (prefill); prompts wait only while swapped-out sequences are pending, since those are older work."""
    running = sorted(ctx.running, key=lambda v: v.rank)
    budget = _make_room_for_growth(running, ctx, knobs)
    if not budget.swap_out:
        _make_room_for_protected(ctx.waiting, running, budget, knobs)
    deferred = _deferred(ctx, budget, knobs)
    returning = [v for v in ctx.swapped if v.seq_id not in deferred]
    swap_in = [] if budget.swap_out else _pick_swap_in(returning, knobs.max_batch_size - len(running), budget, knobs)
    members = (*(v.seq_id for v in running), *swap_in)
    chosen: list[SeqView] = []
    full = False
    if not budget.swap_out and len(swap_in) == len(returning):
        chosen, full = _pick_prefill(ctx.waiting, knobs.max_batch_size - len(members), budget.spare, knobs, budget)
    if chosen:  # with members running this is a prefill (join); otherwise prefill or wait for the batch to fill
        plan = _prefill_or_wait(chosen, full, bool(members), ctx.now_s, knobs)
    elif members:
        plan = StepPlan(StepKind.DECODE, StepReason.DECODE, decode=members)
    else:
        plan = StepPlan(StepKind.IDLE, StepReason.NOTHING_TO_DO)
    return replace(plan, swap_out=tuple(budget.swap_out), swap_in=tuple(swap_in), abort=tuple(budget.abort))


def schedule_static(ctx: StepContext, knobs: SchedulerKnobs) -> StepPlan:
    """The baseline: a batch forms (full, or the timeout), then decodes until every member finishes; nobody joins
    mid-batch. With ``reserve_tokens`` set, each member holds its full reservation, so the batch never swaps."""
    if ctx.running:
        members = tuple(v.seq_id for v in sorted(ctx.running, key=lambda v: v.rank))
        pad = tuple(v.seq_id for v in ctx.holding) if knobs.pad_finished else ()
        return StepPlan(StepKind.DECODE, StepReason.DECODE, decode=members, pad=pad)
    chosen, full = _pick_prefill(ctx.waiting, knobs.max_batch_size, ctx.free_device_blocks, knobs)
    if not chosen:
        return StepPlan(StepKind.IDLE, StepReason.NOTHING_TO_DO)
    return _prefill_or_wait(chosen, full, False, ctx.now_s, knobs)


class SchedulingPolicy(Protocol):
    """What tells the two engines apart: how a step is planned, and when a finished sequence's blocks return."""

    @property
    def knobs(self) -> SchedulerKnobs: ...

    @property
    def release_on_finish(self) -> bool: ...

    def plan(self, ctx: StepContext) -> StepPlan: ...


@dataclass(frozen=True)
class ContinuousPolicy:
    knobs: SchedulerKnobs = SchedulerKnobs()
    release_on_finish: bool = True  # sequence-level release: blocks return the moment a sequence finishes

    def plan(self, ctx: StepContext) -> StepPlan:
        return schedule_continuous(ctx, self.knobs)


@dataclass(frozen=True)
class StaticPolicy:
    knobs: SchedulerKnobs = SchedulerKnobs()
    release_on_finish: bool = False  # batch-level release: blocks return when the whole batch has finished

    def plan(self, ctx: StepContext) -> StepPlan:
        return schedule_static(ctx, self.knobs)
