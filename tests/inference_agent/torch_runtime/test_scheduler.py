"""Continuous and static batching decisions, from plain numbers (no model, no clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inference_agent.torch_runtime.scheduler import (
    SchedulerKnobs,
    SeqView,
    StepContext,
    StepKind,
    StepReason,
    schedule_continuous,
    schedule_static,
)

KNOBS = SchedulerKnobs(max_batch_size=4, batch_timeout_s=0.05, block_size=16)


def waiting(seq_id: str, arrival_s: float, tokens: int = 10, priority: int = 1) -> SeqView:
    return SeqView(seq_id, priority, arrival_s, tokens)


def running(seq_id: str, tokens: int, last: int = 5, priority: int = 1, arrival_s: float = 0.0) -> SeqView:
    return SeqView(seq_id, priority, arrival_s, tokens, blocks=-(-tokens // 16), last_scheduled=last)


@pytest.mark.parametrize(
    ("now_s", "kind", "reason"),
    [
        (1.00, StepKind.IDLE, StepReason.WAIT_FOR_BATCH),  # 0 ms waited of 50
        (1.049, StepKind.IDLE, StepReason.WAIT_FOR_BATCH),
        (1.05, StepKind.PREFILL, StepReason.BATCH_TIMEOUT),
    ],
)
def test_an_idle_engine_waits_the_batch_timeout_for_more_prompts(
    now_s: float, kind: StepKind, reason: StepReason
) -> None:
    plan = schedule_continuous(StepContext(now_s, waiting=(waiting("a", 1.0),), free_device_blocks=100), KNOBS)
    assert (plan.kind, plan.reason) == (kind, reason)
    if kind is StepKind.IDLE:
        assert plan.wait_until_s == pytest.approx(1.05)


def test_a_full_batch_prefills_without_waiting() -> None:
    prompts = tuple(waiting(f"r{i}", 1.0 + i / 1000) for i in range(6))
    plan = schedule_continuous(StepContext(1.01, waiting=prompts, free_device_blocks=100), KNOBS)
    assert (plan.kind, plan.reason, plan.prefill) == (StepKind.PREFILL, StepReason.BATCH_FULL, ("r0", "r1", "r2", "r3"))


def test_a_prompt_joins_a_running_batch_at_once_then_decodes_with_it() -> None:
    ctx = StepContext(2.0, waiting=(waiting("new", 2.0),), running=(running("old", 20),), free_device_blocks=10)
    plan = schedule_continuous(ctx, KNOBS)
    assert (plan.kind, plan.reason, plan.prefill) == (StepKind.PREFILL, StepReason.JOIN_RUNNING, ("new",))
    after = StepContext(2.01, running=(running("old", 20), running("new", 10)), free_device_blocks=9)
    assert set(schedule_continuous(after, KNOBS).decode) == {"old", "new"}


def test_priority_then_arrival_orders_admission() -> None:
    prompts = (waiting("batch", 0.0, priority=2), waiting("late-critical", 0.5, priority=0), waiting("std", 0.1))
    knobs = SchedulerKnobs(max_batch_size=2, block_size=16)
    plan = schedule_continuous(StepContext(1.0, waiting=prompts, free_device_blocks=100), knobs)
    assert plan.prefill == ("late-critical", "std")


def test_prompts_are_grouped_by_length_bucket() -> None:
    prompts = (waiting("short", 0.0, 100), waiting("long", 0.1, 900), waiting("short2", 0.2, 500))
    plan = schedule_continuous(StepContext(1.0, waiting=prompts, free_device_blocks=1000), KNOBS)
    assert plan.prefill == ("short", "short2")  # 100 and 500 → bucket 512; 900 → 1024 waits for its own batch
    assert KNOBS.bucket(5000) == 4096


def test_growth_beyond_free_blocks_swaps_out_the_coldest() -> None:
    # both need a new block for their next token (32 tokens = 2 full blocks); only one block is free
    ctx = StepContext(
        1.0,
        running=(running("hot", 32, last=9), running("cold", 32, last=3)),
        free_device_blocks=1,
        free_host_blocks=10,
    )
    plan = schedule_continuous(ctx, KNOBS)
    assert plan.swap_out == ("cold",) and plan.decode == ("hot",)


def test_swapped_sequences_come_back_before_new_prompts() -> None:
    ctx = StepContext(
        1.0,
        waiting=(waiting("new", 0.5),),
        running=(running("a", 20),),
        swapped=(running("back", 40, last=1),),
        free_device_blocks=5,
    )
    plan = schedule_continuous(ctx, KNOBS)
    assert plan.swap_in == ("back",) and plan.kind is StepKind.PREFILL and plan.prefill == ("new",)
    tight = StepContext(1.0, waiting=ctx.waiting, running=ctx.running, swapped=ctx.swapped, free_device_blocks=2)
    plan = schedule_continuous(tight, KNOBS)  # "back" needs 3 blocks (+0 growth): it waits, and so does "new"
    assert plan.swap_in == () and plan.prefill == () and plan.decode == ("a",)


def test_a_sequence_with_nowhere_to_go_is_aborted() -> None:
    ctx = StepContext(1.0, running=(running("a", 32), running("b", 32, last=1)), free_device_blocks=0)
    plan = schedule_continuous(ctx, KNOBS)  # no host room either
    assert plan.abort == ("b",) and plan.decode == ("a",)


def test_static_batch_runs_to_the_end_without_joiners_and_pads_finished_rows() -> None:
    knobs = SchedulerKnobs(max_batch_size=4, block_size=16, reserve_tokens=512)
    ctx = StepContext(
        5.0,
        waiting=(waiting("late", 4.0),),
        running=(running("a", 40),),
        holding=(running("done", 30),),
        free_device_blocks=500,
    )
    plan = schedule_static(ctx, knobs)
    assert (plan.kind, plan.decode, plan.pad, plan.prefill) == (StepKind.DECODE, ("a",), ("done",), ())


def test_static_batch_size_is_bounded_by_full_length_reservations() -> None:
    knobs = SchedulerKnobs(max_batch_size=8, block_size=16, reserve_tokens=512)  # 32 blocks per sequence
    prompts = tuple(waiting(f"r{i}", 0.0) for i in range(5))
    plan = schedule_static(StepContext(0.001, waiting=prompts, free_device_blocks=100), knobs)
    assert (plan.kind, plan.reason, plan.prefill) == (StepKind.PREFILL, StepReason.BATCH_FULL, ("r0", "r1", "r2"))


def of(tenant: str, view: SeqView) -> SeqView:
    return replace(view, tenant=tenant)


BUDGETS = {"lc": 3, "batch": 7}  # of 10 device blocks


def test_growth_swaps_out_an_over_budget_tenant_before_a_colder_one_within_budget() -> None:
    ctx = StepContext(
        1.0,
        running=(of("lc", running("cold-lc", 32, last=1)), of("batch", running("hot-batch", 32, last=9))),
        free_device_blocks=1,
        free_host_blocks=10,
        kv_budgets={"lc": 3, "batch": 1},  # batch holds 2 of its 1
    )
    plan = schedule_continuous(ctx, KNOBS)
    assert plan.swap_out == ("hot-batch",) and plan.decode == ("cold-lc",)


def test_a_prompt_within_budget_makes_room_by_swapping_out_the_over_budget_tenant() -> None:
    hogs = tuple(of("batch", running(f"b{i}", 20, last=i)) for i in range(4))  # 8 blocks of a budget of 7
    ctx = StepContext(
        1.0, waiting=(of("lc", waiting("short", 0.9, tokens=20)),), running=hogs, free_device_blocks=1,
        free_host_blocks=20, kv_budgets=BUDGETS,
    )  # fmt: skip
    plan = schedule_continuous(ctx, KNOBS)  # "short" needs 2 blocks, 1 is free
    assert plan.swap_out == ("b0",) and plan.prefill == ()  # the coldest of the over-budget tenant
    after = StepContext(
        1.0, waiting=ctx.waiting, running=hogs[1:], swapped=hogs[:1], free_device_blocks=3, free_host_blocks=18,
        kv_budgets=BUDGETS,
    )  # fmt: skip
    plan = schedule_continuous(after, KNOBS)
    assert plan.prefill == ("short",) and plan.swap_in == ()  # b0 back would put batch over: it waits for lc


def test_without_contention_an_over_budget_tenant_keeps_the_free_blocks() -> None:
    hogs = tuple(of("batch", running(f"b{i}", 20, last=i)) for i in range(4))  # 8 blocks, budget 7
    ctx = StepContext(1.0, running=hogs, free_device_blocks=10, free_host_blocks=10, kv_budgets=BUDGETS)
    plan = schedule_continuous(ctx, KNOBS)
    assert plan.swap_out == () and plan.decode == ("b0", "b1", "b2", "b3")  # nobody else needs them
    swapped = StepContext(
        1.0, swapped=(of("batch", running("back", 32, last=1)),), running=hogs[:3], free_device_blocks=6,
        kv_budgets=BUDGETS,
    )  # fmt: skip
    assert schedule_continuous(swapped, KNOBS).swap_in == ("back",)  # nobody within budget waits: it returns
