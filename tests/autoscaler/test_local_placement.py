"""The local actuator on stored reports: a pool defined centrally is placed on the capable up nodes with room (no
agent started with it), the event says per node why a replica did not fit, the pools part tells each node what to
run, a node that goes down is failed over with its detection-to-ready recorded, and a node's refusal is an event."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import Engine, event

from autoscaler.actuators.base import NoPlacement
from autoscaler.actuators.local import LocalActuator
from autoscaler.controller import Controller, ControllerSettings
from autoscaler.failover import Failover, FailoverStore
from autoscaler.scaling_events import EventStore, ReasonCode
from fleet.desired.board import DesiredBoard
from fleet.pools import Policy, Pool, PoolSpec, PoolStore
from fleet.view import FleetReader
from tests.autoscaler.stored_nodes import offers, push
from tests.support.clock import FakeClock
from wire.control import DesiredRefusal, PoolDesired

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = {"engine": "vllm", "model": LLAMA}
TABLES = ("placements", "pools")  # what a tick of the local actuator reads once


def fleet(engine: Engine) -> FleetReader:
    return FleetReader(engine, node_down_after_seconds=3.0, cpu_replicas_per_node=4)


def pool(db: Engine, clock: FakeClock, name: str = "chat", /, **spec: Any) -> Pool:
    """A pool in the registry (static at 2 unless ``spec`` says otherwise; ``engine`` is the pool's engine)."""
    settings: dict[str, Any] = {"min_replicas": 2, "max_replicas": 2, "policy": Policy.STATIC, **spec}
    return PoolStore(db).create(name, PoolSpec(**settings), now=clock())


def local(engine: Engine) -> LocalActuator:
    return LocalActuator(engine, board=DesiredBoard(engine))


def test_a_pool_no_agent_was_started_with_is_placed_on_the_capable_up_nodes(engine: Engine, clock: FakeClock) -> None:
    push(engine, clock, "new-a", capabilities=offers())
    push(engine, clock, "new-b", capabilities=offers())
    push(engine, clock, "old", {"vision": 1})  # an agent older than engine offers: its own --pools only
    actuator = local(engine)
    chat = pool(engine, clock)
    view = fleet(engine).read(clock())
    assert actuator.apply(chat, 2, view) == "placed 2 on new-a: 1, new-b: 1"
    actuator.publish([chat], view)
    told = {n: actuator.board.for_node(n) for n in ("new-a", "new-b", "old")}
    assert all(s is not None and s.pools is not None for s in told.values())
    assert told["new-a"].pools == {"chat": PoolDesired(replicas=1, gpus=1)}  # type: ignore[union-attr]  # text there
    vision = pool(engine, clock, "vision", engine="classify")  # an engine named is an engine told
    assert actuator.apply(vision, 1, view) == "placed 1 on old: 1"  # where it runs already
    actuator.publish([chat, vision], view)
    told_old = actuator.board.for_node("old")
    assert told_old is not None and told_old.pools is not None
    assert told_old.pools["vision"] == PoolDesired(replicas=1, kind="classify", gpus=1)


def test_an_old_agent_keeps_the_pool_it_was_started_with(engine: Engine, clock: FakeClock) -> None:
    push(engine, clock, "old", {"chat": 1})
    assert local(engine).apply(pool(engine, clock), 3, fleet(engine).read(clock())) == "placed 3 on old: 3"


def test_a_pool_from_before_engines_keeps_the_kind_its_nodes_run_and_is_text_on_a_new_one(
    engine: Engine, clock: FakeClock
) -> None:
    push(engine, clock, "runs-it", {"vision": 1}, capabilities=offers())  # as classify, from its --pools
    push(engine, clock, "fresh", capabilities=offers())
    actuator = local(engine)
    vision = pool(engine, clock, "vision", engine=None)
    view = fleet(engine).read(clock())
    assert actuator.apply(vision, 2, view) == "placed 2 on fresh: 1, runs-it: 1"
    actuator.publish([vision], view)
    for node in ("runs-it", "fresh"):  # no kind: the node keeps what it runs it as, text where it runs none yet
        told = actuator.board.for_node(node)
        assert told is not None and told.pools == {"vision": PoolDesired(replicas=1, gpus=1)}


def test_nowhere_to_place_says_why_for_every_node(engine: Engine, clock: FakeClock) -> None:
    push(engine, clock, "a", capabilities=offers(), gpus_mib=[81920, 81920])
    push(engine, clock, "b", capabilities=offers({"vllm": ["other/model"]}))
    push(engine, clock, "old")
    with pytest.raises(NoPlacement) as refused:
        local(engine).apply(pool(engine, clock, **VLLM), 2, fleet(engine).read(clock()))
    assert str(refused.value) == (
        "placed 0 of 2; a: engine 'vllm' not declared; b: engine 'vllm' does not offer model "
        "'meta-llama/Llama-3.1-8B-Instruct'; old: declares no engines (an older agent) and does not run the pool"
    )


def test_a_profile_pool_goes_where_engine_labels_gpus_and_room_allow(engine: Engine, clock: FakeClock) -> None:
    """2 GPUs of 40 GiB per replica, in zone eu-1: a has room for one; the others cannot run it at all."""
    eu = {"zone": "eu-1"}
    push(engine, clock, "a", capabilities=offers({"vllm": [LLAMA]}, eu), gpus_mib=[81920, 81920, 81920])
    push(engine, clock, "b", capabilities=offers(labels=eu), gpus_mib=[81920, 81920])
    push(engine, clock, "c", capabilities=offers({"vllm": [LLAMA]}, {"zone": "us-2"}), gpus_mib=[81920, 81920])
    push(engine, clock, "d", capabilities=offers({"vllm": [LLAMA]}, eu), gpus_mib=[24576, 24576])
    llama = pool(engine, clock, gpus_per_replica=2, gpu_memory_mib=40960, node_selector=eu, **VLLM)
    actuator = local(engine)
    view = fleet(engine).read(clock())
    assert actuator.apply(llama, 3, view) == (
        "placed 1 of 3 on a: 1; no room for 2 on a (1 of 3 GPUs free, 2 per replica); b: engine 'vllm' not "
        "declared; c: labels zone=eu-1 not matched; d: GPUs of 24576 MiB < 40960 MiB"
    )
    actuator.publish([llama], view)
    told = actuator.board.for_node("a")
    assert told is not None and told.pools is not None
    assert told.pools["chat"] == PoolDesired(replicas=1, engine="vllm", model=LLAMA, gpus=2, gpu_memory_mib=40960)


def test_the_other_pools_on_a_node_hold_their_gpus(engine: Engine, clock: FakeClock) -> None:
    """4 GPUs: vision (2 GPUs a replica, in the registry) runs 1, old (not in it) runs 1: 1 GPU is left."""
    pool(engine, clock, "vision", gpus_per_replica=2)
    push(engine, clock, "a", {"vision": 1, "old": 1}, capabilities=offers(), gpus_mib=[81920] * 4)
    chat = pool(engine, clock)
    assert (
        local(engine)
        .apply(chat, 2, fleet(engine).read(clock()))
        .startswith("placed 1 of 2 on a: 1; no room for 1 on a (0 of 4 GPUs free)")
    )


def test_a_tick_reads_the_placements_and_the_registry_once_for_all_its_pools(engine: Engine, clock: FakeClock) -> None:
    """Three pools at 3 on two nodes of 4 CPU slots, vision already running 1 on a: each placement sees the ones the
    tick made before it (in memory, as stored), and the tick reads each table once, not once per pool."""
    push(engine, clock, "a", {"vision": 1}, capabilities=offers())
    push(engine, clock, "b", capabilities=offers())
    pools = [pool(engine, clock, name) for name in ("chat", "embed", "vision")]
    actuator = local(engine)
    view = fleet(engine).read(clock())
    reads: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: reads.append(args[2]))
    notes = [actuator.apply(p, 3, view) for p in pools]
    actuator.publish(pools, view)
    assert notes == [
        "placed 3 on a: 2, b: 1",
        "placed 3 on a: 1, b: 2",
        "placed 2 of 3 on a: 1, b: 1; no room for 1 on a (0 of 4 CPU slots free), b (0 of 4 CPU slots free)",
    ]
    assert [sum(bool(re.match(rf"SELECT .*\bFROM {table}\b", s, re.S)) for s in reads) for table in TABLES] == [1, 1]
    assert actuator.store.layout() == {"chat": {"a": 2, "b": 1}, "embed": {"a": 1, "b": 2}, "vision": {"a": 1, "b": 1}}
    told = actuator.board.for_node("b")
    assert told is not None and told.pools is not None
    assert {name: p.replicas for name, p in told.pools.items()} == {"chat": 1, "embed": 2, "vision": 1}


def tick_controller(engine: Engine, actuator: LocalActuator) -> Controller:
    return Controller(engine, ControllerSettings(), actuator, fleet=fleet(engine), holder="server-a")


def test_a_node_that_stops_pushing_is_failed_over_and_its_detection_to_ready_recorded(
    engine: Engine, clock: FakeClock
) -> None:
    for node in ("a", "b", "c"):
        push(engine, clock, node, capabilities=offers())
    pool(engine, clock, min_replicas=2, max_replicas=2)
    actuator = local(engine)
    loop = tick_controller(engine, actuator)
    loop.run(clock())
    placed = actuator.store.of_pool("chat")
    assert sum(placed.values()) == 2
    lost = next(n for n, c in placed.items() if c == 1)
    kept = [n for n in ("a", "b", "c") if n != lost]
    for node in kept:
        push(engine, clock, node, {"chat": placed.get(node, 0)}, capabilities=offers())
    clock.advance(3.0)  # `lost` has not pushed for 3 s: down (node_down_after_seconds)
    for node in kept:
        push(engine, clock, node, {"chat": placed.get(node, 0)}, capabilities=offers())
    loop.run(clock())
    assert lost not in actuator.store.of_pool("chat") and sum(actuator.store.of_pool("chat").values()) == 2
    detected = clock()
    assert FailoverStore(engine).since(0) == [Failover("chat", lost, detected, 1)]
    clock.advance(5)
    now_placed = actuator.store.of_pool("chat")
    for node in kept:  # the replacement is starting: not ready yet
        ready = placed.get(node, 0)
        push(engine, clock, node, {"chat": ready}, capabilities=offers(), starting={"chat": now_placed[node] - ready})
    loop.run(clock())
    assert FailoverStore(engine).since(0)[0].ready_at is None
    clock.advance(5)
    for node in kept:
        push(engine, clock, node, {"chat": now_placed.get(node, 0)}, capabilities=offers())
    loop.run(clock())
    (failover,) = FailoverStore(engine).since(0)
    assert failover.ready_at == clock() and failover.seconds(clock()) == 10.0


def test_a_node_refusal_is_an_event_once_per_distinct_refusal(engine: Engine, clock: FakeClock) -> None:
    pool(engine, clock)
    loop = tick_controller(engine, local(engine))
    why = DesiredRefusal(reason="UnknownEngine", detail="pools.chat.engine: 'sglang' is not declared")
    for _ in range(2):  # reported push after push: recorded once
        push(engine, clock, "a", {"chat": 1}, capabilities=offers(), refused=why)
        loop.run(clock())
        clock.advance(1)
    other = DesiredRefusal(reason="TooManyReplicas", detail="asks 9 replicas, this node runs at most 4")
    push(engine, clock, "a", {"chat": 1}, capabilities=offers(), refused=other)
    loop.run(clock())
    refusals = EventStore(engine).list(reason=ReasonCode.NODE_REFUSED)
    assert [(e.pool, e.inputs["refusal"], e.note) for e in reversed(refusals)] == [
        ("chat", "UnknownEngine", "pools.chat.engine: 'sglang' is not declared"),
        ("chat", "TooManyReplicas", "asks 9 replicas, this node runs at most 4"),
    ]
    assert "node a refused the desired state: UnknownEngine" in refusals[-1].reason
    assert all(e.family == "refused" for e in refusals)


def test_a_refusal_whose_detail_changes_every_push_is_one_event_keeping_the_latest_detail(
    engine: Engine, clock: FakeClock
) -> None:
    pool(engine, clock)
    loop = tick_controller(engine, local(engine))
    for n in range(5):  # an agent whose detail carries a count or a time: only the reason is the refusal's key
        why = DesiredRefusal(reason="TooManyReplicas", detail=f"asks {9 + n} replicas, this node runs at most 4")
        push(engine, clock, "a", {"chat": 1}, capabilities=offers(), refused=why)
        loop.run(clock())
        clock.advance(1)
    (event,) = EventStore(engine).list(reason=ReasonCode.NODE_REFUSED)  # before: 5, one a tick
    assert event.inputs["refusal"] == "TooManyReplicas"
    assert event.note == "asks 13 replicas, this node runs at most 4" and "asks 13 replicas" in event.reason
