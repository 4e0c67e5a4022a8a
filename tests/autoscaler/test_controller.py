"""The control loop on a real database: decisions recorded and applied, dry-run, manual scale, failures, the
leader lease between two controllers, and the local actuator's placement, failover and desired state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, insert, update

from autoscaler.actuators.base import ActuationError
from autoscaler.actuators.local import LocalActuator
from autoscaler.controller import Controller, ControllerSettings
from collector.tables import NO_DEVICE, nodes, series_latest
from fleet.pools import Mode, Policy, PoolSpec, PoolStore
from fleet.scaling_events import EventStore
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from tests.support.clock import FakeClock


@dataclass
class RecordingActuator:
    name: str = "recording"
    applied: list[tuple[str, int]] = field(default_factory=list)
    error: str | None = None

    def current(self, pool: str) -> int | None:
        return None

    def apply(self, pool: str, replicas: int) -> str:
        if self.error is not None:
            raise ActuationError(self.error)
        self.applied.append((pool, replicas))
        return f"asked for {replicas}"


def report(
    engine: Engine, clock: FakeClock, node: str, pool: str, *, demand: float, ready: int, starting: int = 0
) -> None:
    """``node`` is up and reports ``pool`` with ``ready`` replicas serving ``demand`` requests/s."""
    extra: dict[str, Any] = {"replicas_ready": ready, "replicas_starting": starting}
    with engine.begin() as conn:
        conn.execute(nodes.delete().where(nodes.c.id == node))
        conn.execute(insert(nodes).values(id=node, first_seen=clock() - 600, last_seen=clock()))
        conn.execute(series_latest.delete().where(series_latest.c.node_id == node))
        conn.execute(
            insert(series_latest).values(
                node_id=node, device=NO_DEVICE, pool=pool, ts=clock(), request_rate_per_second=demand, extra=extra
            )
        )


def controller(engine: Engine, actuator: Any, holder: str = "server-a") -> Controller:
    return Controller(engine, ControllerSettings(), actuator, holder=holder)


def chat(engine: Engine, clock: FakeClock, **changes: Any) -> None:
    settings: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": 20,
        "policy": Policy.REACTIVE,
        "replica_capacity": 10.0,
    }
    spec = PoolSpec(**{**settings, **changes})
    PoolStore(engine).create("chat", spec, now=clock())


def test_a_decision_is_applied_stored_and_recorded_with_its_reason(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)  # 140/s needs 20 replicas at 0.7 × 10
    actuator = RecordingActuator()
    decisions = controller(engine, actuator).run(clock())
    assert decisions["chat"].replicas > 2
    wanted = decisions["chat"].replicas
    assert actuator.applied == [("chat", wanted)]
    assert PoolStore(engine).get("chat").desired_replicas == wanted  # type: ignore[union-attr]
    (event,) = EventStore(engine).list(pool="chat")
    assert (event.from_replicas, event.to_replicas, event.outcome, event.policy) == (2, wanted, "applied", "reactive")
    assert "utilization" in event.reason and event.inputs["demand"] == 140.0
    assert event.note == f"asked for {wanted}"


def test_an_unchanged_decision_is_applied_again_but_not_recorded_again(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=10)
    actuator = RecordingActuator()
    loop = controller(engine, actuator)
    loop.run(clock())
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=10)
    loop.run(clock())
    assert actuator.applied == [("chat", 10), ("chat", 10)]  # re-applied every tick: failover needs it
    assert EventStore(engine).list(pool="chat") == []  # 10 → 10 is no event
    stored = PoolStore(engine).get("chat")
    assert stored is not None and stored.desired_replicas == 10  # but the first decision is the desired count


def test_dry_run_decides_and_records_without_applying(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock, mode=Mode.DRY_RUN)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    actuator = RecordingActuator()
    controller(engine, actuator).run(clock())
    assert actuator.applied == []
    (event,) = EventStore(engine).list()
    assert event.outcome == "dry_run" and event.to_replicas > 2


def test_a_manual_scale_overrides_the_policy_until_it_expires(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=10)
    PoolStore(engine).scale_manually("chat", 15, until=clock() + 60, reason="alice: launch day", now=clock())
    actuator = RecordingActuator()
    loop = controller(engine, actuator)
    assert loop.run(clock())["chat"].replicas == 15
    (event,) = EventStore(engine).list()
    assert event.policy == "manual" and "launch day" in event.reason
    clock.advance(61)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=15)
    assert loop.run(clock())["chat"].policy == "reactive"


def test_an_actuation_failure_is_recorded_once_per_error(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    actuator = RecordingActuator(error="deployment chat not found (404)")
    loop = controller(engine, actuator)
    loop.run(clock())
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    loop.run(clock())
    failed = [e for e in EventStore(engine).list() if e.outcome == "failed"]
    assert len(failed) == 1 and failed[0].note == "deployment chat not found (404)"


def test_a_stale_forecast_switches_the_predictive_part_off_and_says_so(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock, policy=Policy.HYBRID)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    store = ForecastStore(engine)
    points = [ForecastPoint(clock() + 60 * k, 500.0, 400.0, 600.0) for k in range(1, 16)]
    store.save(
        [
            GoodForecast(
                SubjectKind.POOL,
                "chat",
                "request_rate_per_second",
                clock() - 600,
                "auto",
                clock() - 600,
                60.0,
                900.0,
                clock() - 7200,
                clock() - 600,
                points,
                None,
            )
        ]
    )
    decision = controller(engine, RecordingActuator()).run(clock())["chat"]
    assert "predictive off (forecast stale: the last forecast is 600 s old)" in decision.reason
    assert decision.inputs["predictive"] == "off"


def test_only_the_lease_holder_acts(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    first, second = RecordingActuator(), RecordingActuator()
    a, b = controller(engine, first, "server-a"), controller(engine, second, "server-b")
    assert a.run(clock()) and not b.run(clock())
    clock.advance(5)
    assert a.run(clock()) and not b.run(clock())  # renewed by its holder
    clock.advance(20)  # server-a stopped renewing: its 15 s lease ran out
    assert b.run(clock()) and not a.run(clock())
    b.stop()  # a server shutting down hands the lease over at once
    assert a.run(clock())
    assert first.applied and second.applied


def test_local_actuator_places_replicas_and_moves_them_off_a_node_that_goes_down(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock)
    for node in ("node-a", "node-b", "node-c"):
        report(engine, clock, node, "chat", demand=20.0, ready=1)
    local = LocalActuator(engine, node_down_after_seconds=3.0, cpu_replicas_per_node=4, clock=clock)
    assert local.apply("chat", 6) == "placed 6 on node-a: 2, node-b: 2, node-c: 2"
    assert local.desired_for_node("node-a") == {"pools": {"chat": {"replicas": 2}}}
    clock.advance(10)  # node-c stops pushing: down
    for node in ("node-a", "node-b"):
        report(engine, clock, node, "chat", demand=30.0, ready=2)
    assert local.apply("chat", 6) == "placed 6 on node-a: 3, node-b: 3"
    assert local.current("chat") == 4
    with engine.begin() as conn:  # node-b is full: other pools take 2 of its 4 slots
        conn.execute(
            insert(series_latest).values(
                node_id="node-b", device=NO_DEVICE, pool="vision", ts=clock(), extra={"replicas_ready": 2}
            )
        )
    assert local.apply("chat", 9).startswith("placed 7 of 9")  # node-a takes 1 more; node-b keeps its 3, no more


def test_desired_state_keeps_unmanaged_pools_and_zeroes_managed_ones_placed_elsewhere(
    engine: Engine, clock: FakeClock
) -> None:
    local = LocalActuator(engine, node_down_after_seconds=3.0, clock=clock)
    report(engine, clock, "node-a", "chat", demand=20.0, ready=1)
    assert local.desired_for_node("node-a") is None  # nothing managed yet: the agent keeps its own pools
    with engine.begin() as conn:
        conn.execute(
            insert(series_latest).values(
                node_id="node-a", device=NO_DEVICE, pool="vision", ts=clock(), extra={"replicas_ready": 3}
            )
        )
    report_b = dict(demand=20.0, ready=1)
    report(engine, clock, "node-b", "chat", **report_b)  # type: ignore[arg-type]
    with engine.begin() as conn:  # node-a's chat is full of other work: everything goes to node-b
        conn.execute(update(nodes).where(nodes.c.id == "node-a").values(last_seen=clock() - 60))
    local.apply("chat", 2)
    assert local.desired_for_node("node-a") == {"pools": {"vision": {"replicas": 3}, "chat": {"replicas": 0}}}
    assert local.desired_for_node("node-b") == {"pools": {"chat": {"replicas": 2}}}


@pytest.mark.parametrize("replicas", [-1])
def test_placement_rejects_a_negative_total(replicas: int) -> None:
    from autoscaler.placement import place

    with pytest.raises(ValueError, match="total"):
        place(replicas, [])


def test_a_new_leader_watches_the_fleet_before_acting(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    actuator = RecordingActuator()
    loop = Controller(engine, ControllerSettings(settle_seconds=10.0), actuator, holder="server-a")
    assert loop.run(clock()) == {} and actuator.applied == []
    clock.advance(10)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    assert loop.run(clock())["chat"].replicas > 2 and actuator.applied


def test_the_first_event_starts_from_what_the_actuators_target_runs(engine: Engine, clock: FakeClock) -> None:
    @dataclass
    class Deployment(RecordingActuator):
        def current(self, pool: str) -> int | None:
            return 7  # e.g. a Deployment's replicas, whatever the agents report

    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    controller(engine, Deployment()).run(clock())
    (event,) = EventStore(engine).list()
    assert event.from_replicas == 7
