"""The control loop with the kubernetes actuator on a real database and the fake API server: a target an HPA or a
KEDA ScaledObject scales is never patched, its decisions are recorded with ScaledByHpa / ScaledByKeda (held), once per
distinct note, and the pool's ``scaled_by`` names the owner until fleetpilot may patch again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from autoscaler.actuators.kubernetes import KubernetesActuator
from autoscaler.controller import Controller, ControllerSettings
from autoscaler.scaling_events import EventStore, ReasonCode
from fleet.pools import Policy, PoolSpec, PoolStore
from fleet.view import FleetReader
from tests.support.clock import FakeClock
from tests.support.fake_kube import SCALED_OBJECT, FakeKube

TARGET = "apps/v1/StatefulSet/serving/llama"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as kube:
        kube.kinds.append(SCALED_OBJECT)
        kube.add_workload("apps/v1", "StatefulSet", "serving", "llama", 1)
        yield kube


@pytest.fixture
def controller(engine: Engine, kube: FakeKube, clock: FakeClock, tmp_path: Path) -> Controller:
    """A static pool of 3 on the StatefulSet; owner lists cached 0 s, so each tick sees the fake's current ones."""
    spec = PoolSpec(min_replicas=3, max_replicas=8, policy=Policy.STATIC, scale_target=TARGET)
    PoolStore(engine).create("chat", spec, now=clock())
    actuator = KubernetesActuator(
        kube.api_client(), "default", clock=clock, owner_cache_s=0, discovery_cache=str(tmp_path / "discovery")
    )
    reader = FleetReader(engine, node_down_after_seconds=3.0, cpu_replicas_per_node=4)
    return Controller(engine, ControllerSettings(), actuator, fleet=reader, holder="server-a")


def test_an_hpa_owned_target_is_not_patched_and_the_event_says_fleetpilot_advises(
    engine: Engine, kube: FakeKube, controller: Controller, clock: FakeClock
) -> None:
    kube.add_hpa("serving", "llama-hpa", "llama", kind="StatefulSet")
    controller.run(clock())
    clock.advance(5)
    controller.run(clock())  # the same owner, the same note: one event
    (event,) = EventStore(engine).list()
    assert (event.reason_code, event.family, event.outcome) == (ReasonCode.SCALED_BY_HPA, "held", "external")
    assert (event.from_replicas, event.to_replicas) == (1, 3)  # from what the StatefulSet runs, to what was decided
    assert event.note == f"HorizontalPodAutoscaler serving/llama-hpa scales {TARGET}; fleetpilot advises only " + (
        "(delete the HPA to let fleetpilot scale it)"
    )
    assert kube.sent("PATCH") == []
    pool = PoolStore(engine).get("chat")
    assert pool is not None
    assert (pool.desired_replicas, pool.scaled_by) == (3, "HorizontalPodAutoscaler serving/llama-hpa")


def test_a_keda_owned_target_is_acted_on_through_keda_and_freed_when_the_scaled_object_goes(
    engine: Engine, kube: FakeKube, controller: Controller, clock: FakeClock
) -> None:
    trigger = {"type": "external", "metadata": {"scalerAddress": "fleetpilot:9090", "pool": "chat"}}
    kube.add_scaled_object("serving", "llama", "llama", kind="StatefulSet", triggers=[trigger])
    controller.run(clock())
    (event,) = EventStore(engine).list(reason=ReasonCode.SCALED_BY_KEDA)
    assert event.note is not None and "fleetpilot acts through it" in event.note
    assert kube.sent("PATCH") == []
    kube.scaled_objects.clear()  # the operator deletes the ScaledObject: fleetpilot scales the target itself
    clock.advance(5)
    controller.run(clock())
    assert kube.workloads[("apps/v1", "StatefulSet", "serving", "llama")].spec_replicas == 3
    pool = PoolStore(engine).get("chat")
    assert pool is not None and pool.scaled_by is None
