"""The control loop on a real database: decisions recorded and applied, dry-run, manual scale, failures, the
leader lease between two controllers, one fleet read per tick, and the local actuator's placement, failover and
the pools part it publishes on the desired-state board."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from autoscaler.actuators.base import ActuationError, Actuator
from autoscaler.actuators.local import LocalActuator
from autoscaler.controller import Controller, ControllerSettings
from autoscaler.policy.band_scale import INITIAL_BAND_SCALE
from autoscaler.policy.settings import PolicySettings
from autoscaler.scaling_events import EventStore, ReasonCode
from collector.registry import NodeStatus, PoolOnNode
from collector.tables import NO_DEVICE, node_reports, nodes, series_latest
from fleet.desired.board import DesiredBoard, DesiredPart, Part
from fleet.desired.pools import Layout, pools_part
from fleet.pools import Mode, Policy, Pool, PoolSpec, PoolStore
from fleet.view import FleetReader, FleetView
from predictor.accuracy import WindowAccuracy
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from tests.support.clock import FakeClock
from tests.support.forecasts import store_scored_forecast
from wire.control import DesiredState, NodeReport, PoolReport


@dataclass
class RecordingActuator:
    name: str = "recording"
    applied: list[tuple[str, int]] = field(default_factory=list)
    fleets: list[FleetView] = field(default_factory=list)  # the view each call was given
    error: str | None = None
    error_type: type[ActuationError] = ActuationError

    def current_replicas(self, pool: Pool, fleet: FleetView) -> int | None:
        return None

    def apply(self, pool: Pool, replicas: int, fleet: FleetView) -> str:
        self.fleets.append(fleet)
        if self.error is not None:
            raise self.error_type(self.error)
        self.applied.append((pool.name, replicas))
        return f"asked for {replicas}"

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        self.fleets.append(fleet)


def report(
    engine: Engine,
    clock: FakeClock,
    node: str,
    pool: str,
    *,
    demand: float,
    ready: int,
    starting: int = 0,
    also: dict[str, int] | None = None,
) -> None:
    """``node`` is up and reports ``pool`` with ``ready`` replicas serving ``demand`` requests/s (and the pools
    ``also`` names with that many ready replicas, no readings)."""
    counts = {pool: PoolReport(ready=ready, starting=starting)} | {
        name: PoolReport(ready=n) for name, n in (also or {}).items()
    }
    body = NodeReport(ts=clock(), pools=counts).model_dump(mode="json")
    with engine.begin() as conn:
        conn.execute(nodes.delete().where(nodes.c.id == node))
        conn.execute(insert(nodes).values(id=node, first_seen=clock() - 600, last_seen=clock()))
        conn.execute(node_reports.delete().where(node_reports.c.node_id == node))
        conn.execute(insert(node_reports).values(node_id=node, ts=clock(), received_at=clock(), report=body))
        conn.execute(series_latest.delete().where(series_latest.c.node_id == node))
        conn.execute(
            insert(series_latest).values(
                node_id=node, device=NO_DEVICE, pool=pool, ts=clock(), request_rate_per_second=demand
            )
        )


def reader(engine: Engine) -> FleetReader:
    return FleetReader(engine, node_down_after_seconds=3.0, cpu_replicas_per_node=4)


def controller(engine: Engine, actuator: Actuator, holder: str = "server-a", **settings: Any) -> Controller:
    return Controller(engine, ControllerSettings(**settings), actuator, fleet=reader(engine), holder=holder)


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


def test_a_forecast_worse_than_naive_over_a_day_hands_the_pool_to_reactive_and_says_so(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock, policy=Policy.HYBRID)
    report(engine, clock, "node-a", "chat", demand=14.0, ready=2)  # 0.7 of 2 replicas × 10/s: on target
    store = ForecastStore(engine)
    poor = WindowAccuracy("24h", 300, 4500, 1.4, 0.82, None, None)
    store_scored_forecast(store, clock(), {"24h": poor, "7d": poor}, hi=600.0)
    decision = controller(engine, RecordingActuator()).run(clock())["chat"]
    assert decision.code is ReasonCode.FORECAST_INACCURATE
    assert "forecast distrusted: its forecasts scored worse than naive over the last 24h (MASE 1.40)" in decision.reason
    assert decision.replicas == 2  # the forecast's 600/s would have asked for 67: reactive decided


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


def fleet_of(*on: tuple[str, str, int, int]) -> FleetView:
    """A view of up nodes running (node, pool, ready, starting)."""
    pools = tuple(PoolOnNode(node, pool, ready, starting, 0.0, {}) for node, pool, ready, starting in on)
    up = frozenset(p.node_id for p in pools)
    return FleetView(0.0, dict.fromkeys(up, NodeStatus.UP), up, pools, (), dict.fromkeys(up, 4))


def told(part: DesiredPart) -> dict[str, dict[str, int]]:
    return {node: {p: d.replicas for p, d in (s.pools or {}).items()} for node, s in part.nodes.items()}


@pytest.mark.parametrize(
    ("on", "layout", "retired", "expected"),
    [
        pytest.param([("a", "chat", 1, 0)], {}, set(), {}, id="nothing-managed-nothing-said"),
        pytest.param(
            [("a", "chat", 1, 0), ("b", "chat", 0, 1), ("b", "vision", 3, 0)],
            {"chat": {"a": 2, "b": 0}},
            set(),
            {"a": {"chat": 2}, "b": {"chat": 0, "vision": 3}},
            id="managed-at-share-unmanaged-restated-at-current",
        ),
        pytest.param(
            [("a", "vision", 1, 0), ("b", "vision", 1, 0)],
            {"chat": {"a": 2}},
            set(),
            {"a": {"chat": 2, "vision": 1}, "b": {"vision": 1}},
            id="a-share-on-a-node-not-running-it-yet",
        ),
        pytest.param(
            [("a", "old", 2, 0), ("a", "vision", 1, 0), ("b", "vision", 1, 0)],
            {},
            {"old"},
            {"a": {"old": 0, "vision": 1}, "b": {"vision": 1}},
            id="a-retired-pool-is-told-zero-where-it-runs",
        ),
        pytest.param([("a", "vision", 1, 0)], {}, {"old"}, {}, id="a-retired-pool-run-nowhere-says-nothing"),
    ],
)
def test_the_pools_part_for_every_up_node(
    on: list[tuple[str, str, int, int]], layout: Layout, retired: set[str], expected: dict[str, dict[str, int]]
) -> None:
    part = pools_part(fleet_of(*on), layout, retired, dict.fromkeys(layout, PoolSpec()))
    assert told(part) == expected
    assert part.common == DesiredState()  # a node not up is told nothing new: it keeps what it was told


def test_local_actuator_places_replicas_and_moves_them_off_a_node_that_goes_down(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock)
    for node in ("node-a", "node-b", "node-c"):
        report(engine, clock, node, "chat", demand=20.0, ready=1)
    fleet = reader(engine)
    local = LocalActuator(engine, board=DesiredBoard(engine))
    pool = PoolStore(engine).get("chat")
    assert pool is not None
    assert local.apply(pool, 6, fleet.read(clock())) == "placed 6 on node-a: 2, node-b: 2, node-c: 2"
    clock.advance(10)  # node-c stops pushing: down
    report(engine, clock, "node-a", "chat", demand=30.0, ready=2)
    report(engine, clock, "node-b", "chat", demand=30.0, ready=1, starting=1)
    assert local.apply(pool, 6, fleet.read(clock())) == "placed 6 on node-a: 3, node-b: 3"
    assert local.current_replicas(pool, fleet.read(clock())) == 4  # current: ready 3 + starting 1
    # node-b is full: another pool takes 2 of its 4 slots
    report(engine, clock, "node-b", "chat", demand=30.0, ready=2, also={"vision": 2})
    view = fleet.read(clock())
    assert local.apply(pool, 9, view).startswith("placed 7 of 9")  # node-a takes 1 more; node-b keeps its 3


def test_the_controller_publishes_the_pools_part_with_unmanaged_pools_kept_and_managed_ones_zeroed(
    engine: Engine, clock: FakeClock
) -> None:
    board = DesiredBoard(engine)
    local = LocalActuator(engine, board=board)
    report(engine, clock, "node-a", "chat", demand=20.0, ready=1, also={"vision": 3})
    report(engine, clock, "node-b", "chat", demand=20.0, ready=1)
    loop = controller(engine, local)
    loop.run(clock())
    assert board.for_node("node-a") is None  # nothing managed yet: each agent keeps its own pools
    chat(engine, clock, min_replicas=2, max_replicas=2)
    loop.run(clock())
    a, b = board.for_node("node-a"), board.for_node("node-b")
    assert a is not None and b is not None
    assert {n: p.replicas for n, p in (a.pools or {}).items()}["vision"] == 3  # restated at what it runs
    assert sum(s.pools["chat"].replicas for s in (a, b) if s.pools) == 2  # the decision, placed over both
    version = board.version(Part.POOLS)
    loop.run(clock())
    assert board.version(Part.POOLS) == version  # the same part is not written again


def test_a_tick_reads_the_fleet_once_for_every_pool_and_actuation(engine: Engine, clock: FakeClock) -> None:
    class CountingReader(FleetReader):
        reads = 0

        def read(self, now: float) -> FleetView:
            CountingReader.reads += 1
            return super().read(now)

    chat(engine, clock)
    PoolStore(engine).create("vision", PoolSpec(min_replicas=1, max_replicas=4, replica_capacity=5.0), now=clock())
    report(engine, clock, "node-a", "chat", demand=20.0, ready=1, also={"vision": 1})
    actuator = RecordingActuator()
    fleet = CountingReader(engine, node_down_after_seconds=3.0, cpu_replicas_per_node=4)
    Controller(engine, ControllerSettings(), actuator, fleet=fleet, holder="server-a").run(clock())
    assert len(actuator.applied) == 2 and len(actuator.fleets) == 3  # two applies and the publish
    assert CountingReader.reads == 1 and all(f is actuator.fleets[0] for f in actuator.fleets)


@pytest.mark.parametrize("replicas", [-1])
def test_placement_rejects_a_negative_total(replicas: int) -> None:
    from autoscaler.placement import place

    with pytest.raises(ValueError, match="total"):
        place(replicas, [])


def test_a_new_leader_watches_the_fleet_before_acting(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    actuator = RecordingActuator()
    loop = controller(engine, actuator, settle_seconds=10.0)
    assert loop.run(clock()) == {} and actuator.applied == []
    clock.advance(10)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    assert loop.run(clock())["chat"].replicas > 2 and actuator.applied


def test_the_first_event_starts_from_what_the_actuators_target_runs(engine: Engine, clock: FakeClock) -> None:
    @dataclass
    class Deployment(RecordingActuator):
        def current_replicas(self, pool: Pool, fleet: FleetView) -> int | None:
            return 7  # e.g. a Deployment's replicas, whatever the agents report

    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=140.0, ready=2)
    controller(engine, Deployment()).run(clock())
    (event,) = EventStore(engine).list()
    assert event.from_replicas == 7


def test_a_tick_the_ready_replicas_fell_short_widens_the_predictive_bound_and_a_met_one_narrows_it(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock, policy=Policy.PREDICTIVE)
    store = ForecastStore(engine)
    store_scored_forecast(store, clock(), {}, hi=60.0)  # yhat 50, hi 60: the bound is 50 + scale × 10
    loop = controller(engine, RecordingActuator())
    report(engine, clock, "node-a", "chat", demand=70.0, ready=6)  # 70/s on 6 × 10: the tick missed
    first = loop.run(clock())["chat"]
    start = PolicySettings().attainment_target
    assert start is not None and first.inputs["band_scale"] == round(INITIAL_BAND_SCALE, 4)
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=8)  # carried: 70 <= 80
    second = loop.run(clock())["chat"]
    widened = math.exp(0.02 * 5 / 60 * start)  # exp(η × the interval's minutes × (1 − α))
    assert second.inputs["band_scale"] == round(INITIAL_BAND_SCALE * widened, 4)
    assert f"toward {start:.1%} attainment" in second.reason
    stored = PoolStore(engine).get("chat")
    assert stored is not None
    widest = loop.context(stored, reader(engine).read(clock()), clock()).provisioning_scale
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=8)
    loop.run(clock())
    assert loop.context(stored, reader(engine).read(clock()), clock()).provisioning_scale < widest


def test_a_reactive_pool_keeps_no_band_scale(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=6)
    loop = controller(engine, RecordingActuator())
    loop.run(clock())
    stored = PoolStore(engine).get("chat")
    assert stored is not None
    assert loop.context(stored, reader(engine).read(clock()), clock()).band_scale is None


def test_the_startup_is_measured_from_the_pools_own_scale_ups_and_replaces_the_configured_one(
    engine: Engine, clock: FakeClock
) -> None:
    chat(engine, clock, startup_seconds=300.0)
    loop = controller(engine, RecordingActuator())
    report(engine, clock, "node-a", "chat", demand=14.0, ready=2)
    loop.run(clock())  # 2 on target
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=2)
    assert loop.run(clock())["chat"].replicas == 4  # asked for 2 more (HPA's step limit)
    clock.advance(90)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=4)
    loop.run(clock())  # ready 90 s after they were asked for
    stored = PoolStore(engine).get("chat")
    assert stored is not None
    ctx = loop.context(stored, reader(engine).read(clock()), clock())
    assert (ctx.startup_seconds, ctx.startup_measurements) == (90.0, 1)
    PoolStore(engine).update("chat", {"startup_seconds": 200.0}, now=clock())  # an operator's correction
    corrected = PoolStore(engine).get("chat")
    assert corrected is not None
    ctx = loop.context(corrected, reader(engine).read(clock()), clock())
    assert (ctx.startup_seconds, ctx.startup_measurements) == (200.0, 0)  # measured again from there


def test_the_pool_keeps_what_it_is_sized_by_and_a_new_leader_carries_it_on(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock, policy=Policy.PREDICTIVE, startup_seconds=300.0)
    first = controller(engine, RecordingActuator(), holder="server-a", lease_seconds=15.0)
    report(engine, clock, "node-a", "chat", demand=14.0, ready=2)
    first.run(clock())  # no forecast yet: reactive keeps 2
    clock.advance(5)
    store_scored_forecast(ForecastStore(engine), clock(), {}, hi=60.0)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=2)  # short: the bound widens, 2 more asked for
    assert first.run(clock())["chat"].replicas == 4
    for _ in range(11):  # still short, tick after tick: the bound's scale grows past what 3 digits show as 1
        clock.advance(5)
        report(engine, clock, "node-a", "chat", demand=70.0, ready=2)
        first.run(clock())
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=4)  # the scale-up ready 60 s after it was asked
    first.run(clock())
    stored = PoolStore(engine).get("chat")
    assert stored is not None and stored.provisioning is not None
    kept = stored.provisioning
    assert kept.band_scale is not None and kept.band_scale > INITIAL_BAND_SCALE
    assert (kept.startup_seconds, kept.startup_measurements) == (60.0, 1)

    first.stop()  # another server leads from here, with nothing in memory
    second = controller(engine, RecordingActuator(), holder="server-b")
    context = second.context(stored, reader(engine).read(clock()), clock())
    assert context.band_scale == kept.band_scale and context.startup_seconds == 60.0


def test_a_dry_run_pools_decisions_time_no_startup(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock, mode=Mode.DRY_RUN, startup_seconds=300.0)
    loop = controller(engine, RecordingActuator())
    report(engine, clock, "node-a", "chat", demand=14.0, ready=2)
    loop.run(clock())
    clock.advance(5)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=2)
    loop.run(clock())  # would ask for more: recorded, not applied
    clock.advance(60)
    report(engine, clock, "node-a", "chat", demand=70.0, ready=4)  # replicas someone else started
    loop.run(clock())
    stored = PoolStore(engine).get("chat")
    assert stored is not None and stored.provisioning is not None
    assert (stored.provisioning.startup_seconds, stored.provisioning.startup_measurements) == (300.0, 0)


def test_the_pool_keeps_what_its_max_holds_back_until_the_policy_wants_less(engine: Engine, clock: FakeClock) -> None:
    chat(engine, clock, max_replicas=4)
    loop = controller(engine, RecordingActuator())
    report(engine, clock, "node-a", "chat", demand=140.0, ready=4)  # 140/s wants 20 at 0.7 × 10: held at 4
    assert loop.run(clock())["chat"].replicas == 4
    held = PoolStore(engine).get("chat")
    assert held is not None and held.provisioning is not None and held.provisioning.wanted == 20
    clock.advance(15)
    report(engine, clock, "node-a", "chat", demand=21.0, ready=4)  # 21/s: 3 replicas, within the bounds
    loop.run(clock())
    within = PoolStore(engine).get("chat")
    assert within is not None and within.provisioning is not None and within.provisioning.wanted is None


@pytest.mark.parametrize(
    ("settings", "down_after_s"),
    [({"scale_down_window_seconds": 60.0}, 65), ({}, 305)],  # {}: the default, HPA's 300 s
    ids=["60 s", "default"],
)
def test_the_scale_down_waits_the_configured_stabilization_window(
    engine: Engine, clock: FakeClock, settings: dict[str, Any], down_after_s: int
) -> None:
    chat(engine, clock, max_replicas=4, startup_seconds=10.0)
    loop = controller(engine, RecordingActuator(), **settings)
    report(engine, clock, "node-a", "chat", demand=28.0, ready=4)  # 28/s: 4 replicas at 0.7 × 10
    start = clock()
    assert loop.run(start)["chat"].replicas == 4
    replicas: dict[int, int] = {}
    while clock() - start < down_after_s:
        clock.advance(5)
        report(engine, clock, "node-a", "chat", demand=7.0, ready=4)  # 7/s: 1 replica
        replicas[round(clock() - start)] = loop.run(clock())["chat"].replicas
    assert replicas[down_after_s - 10] == 4  # every recommendation in the window still includes the 4
    assert replicas[down_after_s] < 4
