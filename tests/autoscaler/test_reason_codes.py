"""Reason codes through the control loop: each recorded event keeps its decision's code, the events counter is
labelled with it, and an actuation with nowhere to place replicas is NoPlacement."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from autoscaler.actuators.base import NoPlacement
from autoscaler.controller import AutoscalerTelemetry
from autoscaler.scaling_events import EventStore, ReasonCode
from fleet.pools import Mode, PoolStore
from tests.autoscaler.test_controller import RecordingActuator, chat, controller, report
from tests.support.clock import FakeClock


def test_a_recorded_event_keeps_its_decisions_code(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)  # wants 20; the step limit allows fewer per tick
    decision = controller(engine, RecordingActuator()).run(clock())["chat"]
    (event,) = EventStore(engine).list()
    assert event.reason_code is decision.code is ReasonCode.STEP_LIMIT


def test_the_events_counter_is_labelled_with_the_code_and_a_dry_run_keeps_what_it_decided(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock, mode=Mode.DRY_RUN, max_replicas=3)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)  # wants 20, the pool stops at 3
    registry = CollectorRegistry()
    loop = controller(engine, RecordingActuator())
    loop.telemetry = AutoscalerTelemetry(registry)
    loop.run(clock())
    (event,) = EventStore(engine).list()
    assert (event.outcome, event.reason_code) == ("dry_run", ReasonCode.MAX_REPLICAS)
    labels = {"pool": "chat", "policy": "reactive", "outcome": "dry_run", "reason": "MaxReplicas"}
    assert registry.get_sample_value("fleetpilot_autoscaler_scaling_events_total", labels) == 1.0


def test_a_manual_scale_is_manual_override(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=10)
    PoolStore(engine).scale_manually("chat", 15, until=clock() + 60, reason="alice", now=clock())
    controller(engine, RecordingActuator()).run(clock())
    assert [e.reason_code for e in EventStore(engine).list()] == [ReasonCode.MANUAL_OVERRIDE]


def test_an_actuation_with_no_node_to_place_on_is_no_placement_and_another_failure_keeps_its_code(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock, max_replicas=3)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    # the local actuator's refusal when no up node can take a replica (autoscaler/actuators/local.py)
    nowhere = RecordingActuator(error="placed 0 of 3; node-a: engine 'vllm' not declared", error_type=NoPlacement)
    controller(engine, nowhere).run(clock())
    (event,) = EventStore(engine).list()
    assert (event.outcome, event.reason_code) == ("failed", ReasonCode.NO_PLACEMENT)
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    controller(engine, RecordingActuator(error="deployment chat not found (404)")).run(clock())
    newest = EventStore(engine).list()[0]
    assert (newest.outcome, newest.reason_code) == ("failed", ReasonCode.MAX_REPLICAS)
