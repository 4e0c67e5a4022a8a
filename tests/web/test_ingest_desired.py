"""The ingest answer's ``desired`` is a lookup on the desired-state board: no statement of its own per request, and
a deleted pool is drained: its placements, quotas and throttles go, and a node still running it is told 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, func, select

from autoscaler.controller import Controller, ControllerSettings
from fleet.desired.board import DesiredPart, Part
from fleet.desired.pools import placements, retired_pools
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from isolation.events import EnforcementEvent, throttle_levels
from isolation.tenants import QuotaSpec, TenantStore, tenant_quotas
from tests.conftest import pool_sample
from tests.support.clock import FakeClock
from web.app import create_app
from web.services import AppServices
from wire.control import DesiredState, PoolLimits, QuotaDesired, SloClass, TenantDesired, key_digest, new_tenant_key

Auth = Callable[..., dict[str, str]]
CHAT = {"name": "chat", "policy": "reactive", "replica_capacity": 10.0, "min_replicas": 2, "max_replicas": 2}


def push(client: TestClient, headers: dict[str, str], clock: FakeClock, seq: int, **pools: int) -> Any:
    """node-a sends one sample of each pool it runs and its report (``pools``: name → ready replicas)."""
    body = {
        "node_id": "node-a",
        "samples": [pool_sample(seq * 10 + i, clock(), pool=name) for i, name in enumerate(pools)],
        "report": {"ts": clock(), "pools": {name: {"ready": n} for name, n in pools.items()}},
    }
    answer = client.post("/api/v1/ingest", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()["desired"]


def tick(services: AppServices, clock: FakeClock) -> None:
    loop = Controller(services.engine, ControllerSettings(), services.actuator, fleet=services.fleet, holder="test")
    loop.run(clock())
    loop.stop()


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def count(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(table)) or 0)


def test_an_answer_with_managed_pools_and_tenants_reads_nothing_for_its_desired_state(
    client: TestClient, auth: Auth, services: AppServices, clock: FakeClock
) -> None:
    assert client.post("/api/v1/pools", json=CHAT, headers=auth("admin")).status_code == 201
    agent = auth("agent", "node-a")
    push(client, agent, clock, 1, chat=1)  # the node is known: its later batches are alike
    with statements(services.engine) as before:
        assert push(client, agent, clock, 2, chat=1) is None  # nothing decided yet
    tick(services, clock)  # the chat pool is managed: its 2 replicas are node-a's
    acme = TenantDesired(slo_class=SloClass.LATENCY_CRITICAL, quotas={"chat": QuotaDesired(rate_rps=5.0)})
    services.desired.publish(Part.TENANTS, DesiredPart(common=DesiredState(tenants={"acme": acme})), now=clock())
    with statements(services.engine) as after:
        desired = push(client, agent, clock, 3, chat=1)
    assert desired == {
        "pools": {"chat": {"replicas": 2, "gpus": 1}},  # a managed pool says the GPUs a replica gets
        "tenants": {"acme": {"slo_class": "latency_critical", "quotas": {"chat": {"rate_rps": 5.0}}}},
    }
    assert after == before  # the ingest statements themselves, not one more for the desired state


def test_deleting_a_pool_deletes_what_it_kept_and_drains_it_from_the_nodes(
    client: TestClient, auth: Auth, services: AppServices, clock: FakeClock
) -> None:
    assert client.post("/api/v1/pools", json=CHAT, headers=auth("admin")).status_code == 201
    agent = auth("agent", "node-a")
    push(client, agent, clock, 1, chat=1)
    TenantStore(services.engine).create("acme", SloClass.STANDARD, {"chat": QuotaSpec(rate_rps=5.0)}, now=clock())
    throttle = EnforcementEvent(clock(), "acme", "node-a", "chat", "throttle", "noisy", 1.0, 0.5, "noisy", {})
    services.enforcement.record([throttle])
    tick(services, clock)
    services.publish_tenants()
    told = push(client, agent, clock, 2, chat=2)
    assert told is not None and told["pools"] == {"chat": {"replicas": 2, "gpus": 1}}
    assert "chat" in told["tenants"]["acme"]["quotas"]
    assert all(count(services.engine, t) == 1 for t in (tenant_quotas, throttle_levels)) and count(
        services.engine, placements
    )

    assert client.delete("/api/v1/pools/chat", headers=auth("admin")).status_code == 204
    assert [count(services.engine, t) for t in (placements, tenant_quotas, throttle_levels)] == [0, 0, 0]
    clock.advance(1)
    tick(services, clock)  # node-a still runs chat: it is told to run none
    told = push(client, agent, clock, 3, chat=2)
    assert told is not None and told["pools"] == {"chat": {"replicas": 0}}
    assert told["tenants"]["acme"]["quotas"] == {}  # the deleted pool's quota is gone from the node at once
    clock.advance(4)  # past node_down_after_seconds: chat's last series is of a pool gone from the node
    push(client, agent, clock, 4)  # drained: it runs no chat replica any more
    tick(services, clock)
    assert count(services.engine, retired_pools) == 0  # forgotten once no up node runs it
    assert (push(client, agent, clock, 5) or {}).get("pools") is None


def test_a_restarted_server_s_first_answer_carries_the_stored_desired_state(
    services: AppServices, settings: ServerSettings, auth: Auth, clock: FakeClock
) -> None:
    key = key_digest(new_tenant_key())
    acme = TenantDesired(quotas={"chat": QuotaDesired(rate_rps=5.0)})
    stored = DesiredState(
        tenants={"acme": acme}, pool_limits={"chat": PoolLimits(cpu_share=0.2)}, tenant_keys={key: "acme"}
    )
    services.desired.publish(Part.TENANTS, DesiredPart(common=stored), now=clock())
    restarted = build_services(settings, services.engine)  # a new process, before its board's first refresh
    restarted.clock = clock
    with TestClient(create_app(restarted)) as client:
        desired = push(client, auth("agent", "node-a"), clock, 1, chat=1)
    # before: null for the first second, and the agent, told nothing, refused every key and lifted every limit
    assert desired is not None and desired["tenant_keys"] == {key: "acme"}
    assert desired["pool_limits"] == {"chat": {"cpu_share": 0.2}} and desired["tenants"]["acme"]["quotas"]
