"""KEDA's external scaler over gRPC: a real server on loopback, the stub generated from KEDA's proto as the client,
a real database with pools, node reports and stored forecasts. The value is the predictive policy's number, a stale
forecast falls back to live demand with one event, dry-run pools keep their replicas, and bad input is answered
with the status KEDA logs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, delete, insert

from autoscaler.actuators.local import LocalActuator
from autoscaler.controller import Controller, ControllerSettings
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.scaler import KedaScaler, KedaServer, metric_name
from autoscaler.policy.predictive import Predictive
from autoscaler.scaling_events import EventStore, ReasonCode
from collector.tables import NO_DEVICE, series_latest
from fleet.desired.board import DesiredBoard
from fleet.pools import Mode, Policy, PoolSpec, PoolStore
from fleet.view import FleetReader
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from tests.autoscaler.stored_nodes import push
from tests.support.clock import FakeClock

STALE_AFTER_S = 180.0
METRIC = "request_rate_per_second"


def fleet_reader(engine: Engine) -> FleetReader:
    return FleetReader(engine, node_down_after_seconds=3.0, cpu_replicas_per_node=8)


@contextmanager
def served_stub(engine: Engine, clock: FakeClock) -> Iterator[ExternalScalerStub]:
    """The scaler served with its defaults (the stream cap, the workers), as the server serves it, and a client."""
    scaler = KedaScaler(
        pools=PoolStore(engine),
        fleet=fleet_reader(engine),
        forecasts=ForecastStore(engine),
        events=EventStore(engine),
        forecast_stale_after_seconds=STALE_AFTER_S,
        poll_seconds=0.05,
        clock=clock,
    )
    server = KedaServer(scaler, "127.0.0.1", 0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    finally:
        server.stop(grace_seconds=1.0)


@pytest.fixture
def stub(engine: Engine, clock: FakeClock) -> Iterator[ExternalScalerStub]:
    with served_stub(engine, clock) as served:
        yield served


def pool(engine: Engine, clock: FakeClock, name: str = "chat", **changes: Any) -> None:
    spec: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": 40,
        "policy": Policy.PREDICTIVE,
        "replica_capacity": 10.0,
        "startup_seconds": 120.0,
    }
    PoolStore(engine).create(name, PoolSpec(**{**spec, **changes}), now=clock())


def report(engine: Engine, clock: FakeClock, *, demand: float, ready: int, pool_name: str = "chat") -> None:
    """node-a is up now with ``ready`` replicas of the pool serving ``demand`` requests/s."""
    push(engine, clock, "node-a", {pool_name: ready})
    row = {"node_id": "node-a", "device": NO_DEVICE, "pool": pool_name}
    with engine.begin() as conn:
        conn.execute(delete(series_latest).where(*(series_latest.c[k] == v for k, v in row.items())))
        conn.execute(insert(series_latest).values(**row, ts=clock(), **{METRIC: demand}))


def forecast(engine: Engine, clock: FakeClock, upper: Any, pool_name: str = "chat") -> None:
    """A fresh forecast: one point a minute for 15 minutes, the k-th ``upper(k)`` with a band of no width, so that
    the predictive bound is ``upper(k)`` whatever its band scale."""
    points = [ForecastPoint(clock() + 60 * k, upper(k), upper(k), upper(k)) for k in range(1, 16)]
    now = clock()
    good = GoodForecast(
        SubjectKind.POOL, pool_name, METRIC, now, "auto", now, 60.0, 900.0, now - 3600, now, points, None
    )
    ForecastStore(engine).save([good])


def forecast_fails(engine: Engine, clock: FakeClock, pool_name: str = "chat") -> None:
    ForecastStore(engine).mark_failed(
        [(SubjectKind.POOL, pool_name, METRIC, "the model did not converge")], attempted_at=clock()
    )


def ref(pool_name: str | None = "chat") -> pb.ScaledObjectRef:
    metadata = {} if pool_name is None else {"pool": pool_name}
    return pb.ScaledObjectRef(name="chat-scaler", namespace="inference", scalerMetadata=metadata)


def metric_value(stub: ExternalScalerStub, pool_name: str = "chat") -> float:
    answer = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(pool_name), metricName=metric_name(pool_name)))
    (value,) = answer.metricValues
    assert value.metricName == metric_name(pool_name)
    assert value.metricValue == math.ceil(value.metricValueFloat)
    return float(value.metricValueFloat)


def target(stub: ExternalScalerStub, pool_name: str = "chat") -> float:
    (spec,) = stub.GetMetricSpec(ref(pool_name)).metricSpecs
    assert spec.metricName == metric_name(pool_name)
    return float(spec.targetSizeFloat)


def test_hpa_on_the_served_metric_asks_for_what_the_predictive_policy_wants(
    engine: Engine, clock: FakeClock, stub: ExternalScalerStub
) -> None:
    pool(engine, clock)
    report(engine, clock, demand=40.0, ready=2)
    # upper bound 100 + 10k at now + 60k s: the window [now + 120, now + 180) holds k = 2 only → 120
    forecast(engine, clock, lambda k: 100.0 + 10 * k)
    controller = Controller(
        engine,
        ControllerSettings(forecast_stale_after_seconds=STALE_AFTER_S),
        LocalActuator(engine, board=DesiredBoard(engine)),
        fleet=fleet_reader(engine),
        holder="test",
    )
    stored = PoolStore(engine).get("chat")
    assert stored is not None
    decision = Predictive().decide(controller.context(stored, fleet_reader(engine).read(clock()), clock()))

    value, per_replica = metric_value(stub), target(stub)
    assert (value, per_replica) == (120.0, 10.0)  # capacity 10 at predictive_utilization 1
    assert math.ceil(value / per_replica) == decision.replicas == 12  # KEDA's HPA: ceil(120 / 10)
    assert stub.IsActive(ref()).result is True
    assert EventStore(engine).list(pool="chat") == []  # a forecast served as such is no event


def test_a_stale_forecast_falls_back_to_live_demand_with_one_event_per_transition(
    engine: Engine, clock: FakeClock, stub: ExternalScalerStub
) -> None:
    pool(engine, clock)
    report(engine, clock, demand=28.0, ready=2)
    forecast(engine, clock, lambda k: 120.0)
    assert metric_value(stub) == 120.0
    forecast_fails(engine, clock)
    # live demand at reactive's headroom: 28 × 1 / 0.7, so KEDA asks for ceil(40 / 10) = 4 = reactive's count
    assert [metric_value(stub) for _ in range(3)] == [40.0, 40.0, 40.0]
    (event,) = EventStore(engine).list(pool="chat")
    assert event.reason_code is ReasonCode.FORECAST_STALE and event.policy == "keda"
    assert "the model did not converge" in event.reason and "live demand 40" in event.reason
    assert (event.inputs["source"], event.inputs["value"], event.inputs["target"]) == ("live", 40.0, 10.0)

    forecast(engine, clock, lambda k: 120.0)  # back: the forecast again, no event
    assert metric_value(stub) == 120.0
    clock.advance(STALE_AFTER_S + 1)  # too old now (the demand reported again, fresh)
    report(engine, clock, demand=35.0, ready=2)
    assert metric_value(stub) == 50.0
    assert metric_value(stub) == 50.0
    events = EventStore(engine).list(pool="chat", reason=ReasonCode.FORECAST_STALE)
    assert len(events) == 2 and "181 s old" in events[0].reason


def test_a_dry_run_pool_is_served_its_current_replicas_and_what_it_would_get_is_recorded(
    engine: Engine, clock: FakeClock, stub: ExternalScalerStub
) -> None:
    pool(engine, clock, mode=Mode.DRY_RUN)
    report(engine, clock, demand=40.0, ready=3)
    forecast(engine, clock, lambda k: 120.0)
    assert [metric_value(stub) for _ in range(2)] == [30.0, 30.0]  # 3 × 10: KEDA's HPA keeps 3
    (event,) = EventStore(engine).list(pool="chat")
    assert (event.outcome, event.from_replicas, event.to_replicas) == ("dry_run", 3, 12)
    assert event.inputs["served"] == 30.0 and event.inputs["value"] == 120.0
    assert event.reason_code is ReasonCode.FORECAST_PEAK

    forecast(engine, clock, lambda k: 180.0)  # would be 18 now: recorded once more
    assert metric_value(stub) == 30.0
    assert [e.to_replicas for e in EventStore(engine).list(pool="chat")] == [18, 12]


@pytest.mark.parametrize(
    ("min_replicas", "upper", "active"),
    [(0, 0.0, False), (0, 5.0, True), (1, 0.0, True)],
)
def test_is_active_says_whether_the_pool_needs_any_replica(
    engine: Engine, clock: FakeClock, stub: ExternalScalerStub, min_replicas: int, upper: float, active: bool
) -> None:
    pool(engine, clock, min_replicas=min_replicas)
    forecast(engine, clock, lambda k: upper)
    assert stub.IsActive(ref()).result is active


def test_stream_is_active_answers_at_once_and_again_on_a_change(
    engine: Engine, clock: FakeClock, stub: ExternalScalerStub
) -> None:
    pool(engine, clock, min_replicas=0)
    forecast(engine, clock, lambda k: 0.0)
    stream = stub.StreamIsActive(ref(), timeout=20)
    try:
        assert next(stream).result is False
        forecast(engine, clock, lambda k: 30.0)
        assert next(stream).result is True
        forecast(engine, clock, lambda k: 0.0)
        assert next(stream).result is False
    finally:
        stream.cancel()


def rpc_error(call: Any, request: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(request)
    return raised.value


@pytest.mark.parametrize(
    ("method", "request_", "code", "message"),
    [
        (
            "GetMetricSpec",
            ref(None),
            grpc.StatusCode.INVALID_ARGUMENT,
            "ScaledObject inference/chat-scaler: its trigger metadata names no pool (metadata: pool: NAME)",
        ),
        ("IsActive", ref("../chat"), grpc.StatusCode.INVALID_ARGUMENT, "metadata pool '../chat' is not a pool name"),
        ("GetMetricSpec", ref("ghost"), grpc.StatusCode.NOT_FOUND, "inference/chat-scaler: no pool named 'ghost'"),
        (
            "GetMetrics",
            pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="s0-fleetpilot-chat"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "metricName 's0-fleetpilot-chat' is not pool chat's metric ('fleetpilot-chat')",
        ),
        ("GetMetricSpec", ref("bare"), grpc.StatusCode.FAILED_PRECONDITION, "no per-replica capacity configured"),
        (
            "GetMetrics",
            pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="fleetpilot-chat"),
            grpc.StatusCode.UNAVAILABLE,
            "no forecast and no fresh demand sample (none reported)",
        ),
    ],
)
def test_bad_input_is_answered_with_a_status_naming_it(
    engine: Engine,
    clock: FakeClock,
    stub: ExternalScalerStub,
    method: str,
    request_: Any,
    code: grpc.StatusCode,
    message: str,
) -> None:
    pool(engine, clock)
    pool(engine, clock, "bare", replica_capacity=None)
    error = rpc_error(getattr(stub, method), request_)
    assert error.code() is code
    assert message in error.details()
