"""Failover within 3 s, through the server's own services: a pool created with ``POST /pools`` (no agent started with
it) is placed on the capable nodes; a node that stops pushing leaves ``GET /routing/weights`` 3 s after its last
push (``node_down_after_seconds``' default), its replicas are placed on the others at the next tick, and the fleet
health report's failover time is the recorded detection → ready."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from autoscaler.controller import Controller, ControllerSettings
from collector.fleet_health import failover_seconds
from tests.autoscaler.stored_nodes import offers, push
from tests.support.clock import FakeClock
from web.dashboard.health_figures import NOT_MEASURED, gather
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
CHAT = {"name": "chat", "min_replicas": 2, "max_replicas": 2, "policy": "static"}


def weighted(client: TestClient, auth: Auth) -> list[str]:
    answer = client.get("/api/v1/routing/weights", headers=auth("viewer"))
    assert answer.status_code == 200, answer.text
    return sorted(item["node"] for item in answer.json()["items"])


def test_a_silent_node_leaves_the_weights_in_3_s_and_its_replicas_are_ready_elsewhere_measured(
    client: TestClient, auth: Auth, services: AppServices, clock: FakeClock
) -> None:
    assert services.fleet.node_down_after_seconds == 3.0  # the default, as the server builds it
    loop = Controller(services.engine, ControllerSettings(), services.actuator, fleet=services.fleet, holder="s")
    for node in ("a", "b"):
        push(services.engine, clock, node, capabilities=offers(), gpu_utilization=0.5)
    assert client.post("/api/v1/pools", json=CHAT, headers=auth("admin")).status_code == 201
    loop.run(clock())
    health = gather(services).now
    assert health.failover_seconds is None and health.notes["failover_seconds"] == NOT_MEASURED["failover_seconds"]
    push(services.engine, clock, "a", {"chat": 1}, capabilities=offers())
    push(services.engine, clock, "b", {"chat": 1}, capabilities=offers())

    clock.advance(2.9)
    push(services.engine, clock, "a", {"chat": 1}, capabilities=offers())
    assert weighted(client, auth) == ["a", "b"]  # b's last push is 2.9 s old: still up
    clock.advance(0.1)
    assert weighted(client, auth) == ["a"]  # 3 s: down, and dropped from the weights

    loop.run(clock())  # the next decision: b's replica goes to a
    desired = services.desired.for_node("a")
    assert desired is not None and desired.pools is not None and desired.pools["chat"].replicas == 2
    clock.advance(4.5)
    push(services.engine, clock, "a", {"chat": 2}, capabilities=offers())
    loop.run(clock())
    health = gather(services).now
    assert health.failover_seconds == 4.5
    assert "chat, 1 replicas off b, ready 4.5 s after detection" in health.notes["failover_seconds"]


def test_the_failover_figure_is_the_worst_of_the_hour_and_an_open_one_counts_so_far() -> None:
    assert failover_seconds([], 100.0) is None
    assert failover_seconds([(10.0, 14.5), (20.0, 22.0)], 100.0) == 4.5
    assert failover_seconds([(10.0, 14.5), (60.0, None)], 100.0) == 40.0  # not ready yet: 40 s and growing
