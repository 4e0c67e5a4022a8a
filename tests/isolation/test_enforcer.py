"""The enforcement loop on a real database: a noisy batch tenant throttled while a latency-critical one misses its
SLO, the throttle in the next ingest answer, restored when calm, nothing done on missing data, only the lease holder
acting, and the stored level surviving a change of leader."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, insert

from collector.registry import PoolOnNode
from collector.tables import NO_DEVICE, node_reports, nodes, series_latest
from fleet.desired.board import DesiredBoard, Part
from fleet.pools import PoolSpec, PoolStore
from inference_agent.serving.frontend.admission import Quota, QuotaBook
from isolation.enforcer import Enforcer, EnforcerLoopSettings, observe
from isolation.events import EnforcementStore
from isolation.noisy import ActionKind
from isolation.tenants import QuotaSpec, Tenant, TenantStore
from tests.support.clock import FakeClock
from tests.support.fleet_reader import fleet_reader
from web.services import AppServices
from wire.control import DesiredState, NodeReport, SloClass, TenantUsage

NOISY = {"lc": {"tokens_per_second": 10.0, "latency_p99_seconds": 0.3}, "bulk": {"tokens_per_second": 90.0}}
CALM = {"lc": {"tokens_per_second": 10.0, "latency_p99_seconds": 0.05}, "bulk": {"tokens_per_second": 90.0}}


def report(engine: Engine, clock: FakeClock, usage: dict[str, Any], node: str = "node-a") -> None:
    """``node`` is up and its text pool ``chat`` (one replica) reports this per-tenant usage now."""
    body = {"ts": clock(), "pools": {"chat": {"ready": 1, "tenants": usage}}}
    with engine.begin() as conn:
        for table, column in ((nodes, nodes.c.id), (node_reports, node_reports.c.node_id)):
            conn.execute(table.delete().where(column == node))
        conn.execute(insert(nodes).values(id=node, first_seen=clock() - 600, last_seen=clock()))
        conn.execute(insert(node_reports).values(node_id=node, ts=clock(), received_at=clock(), report=body))
        conn.execute(series_latest.delete().where(series_latest.c.node_id == node))
        conn.execute(
            insert(series_latest).values(
                node_id=node, device=NO_DEVICE, pool="chat", ts=clock(), token_throughput_per_second=100.0
            )
        )


@pytest.fixture
def tenants(engine: Engine, clock: FakeClock) -> None:
    """Pool chat promises p99 ≤ 100 ms; lc is latency-critical on it, bulk is batch with 8 rps and 8 in flight."""
    PoolStore(engine).create("chat", PoolSpec(slo_p99_seconds=0.1), now=clock())
    store = TenantStore(engine)
    store.create("lc", SloClass.LATENCY_CRITICAL, {"chat": QuotaSpec(rate_rps=10.0, max_concurrency=4)}, now=clock())
    store.create("bulk", SloClass.BATCH, {"chat": QuotaSpec(rate_rps=8.0, max_concurrency=8)}, now=clock())


def enforcer(engine: Engine, holder: str = "server-a", services: AppServices | None = None) -> Enforcer:
    if services is not None:
        return Enforcer(
            services.fleet,
            EnforcerLoopSettings(),
            board=services.desired,
            holder=holder,
            telemetry=services.enforcer_telemetry,
        )
    return Enforcer(fleet_reader(engine), EnforcerLoopSettings(), board=DesiredBoard(engine), holder=holder)


def ticks(loop: Enforcer, engine: Engine, clock: FakeClock, usage: dict[str, Any], n: int) -> list[ActionKind]:
    """``n`` windows of ``usage``, 10 s apart; the kinds of the actions taken."""
    kinds = []
    for _ in range(n):
        clock.advance(10)
        report(engine, clock, usage)
        kinds += [a.kind for a in loop.run(clock())]
    return kinds


def told(services: AppServices) -> DesiredState:
    """What node-a's next ingest answer says (the board the enforcer published on)."""
    return services.desired.for_node("node-a") or DesiredState()


def bulk_quota(services: AppServices) -> Quota:
    return QuotaBook.from_desired(told(services)).policy("bulk").quota("chat")


@pytest.mark.usefixtures("tenants")
def test_a_noisy_tenant_is_throttled_on_the_third_window_and_its_quota_halved(
    engine: Engine, clock: FakeClock, services: AppServices
) -> None:
    loop = enforcer(engine, services=services)
    assert ticks(loop, engine, clock, NOISY, 2) == []
    assert bulk_quota(services) == Quota(rate_rps=8.0, burst=8.0, max_concurrency=8, kv_share=0.5)
    assert ticks(loop, engine, clock, NOISY, 1) == [ActionKind.THROTTLE]
    (event,) = EnforcementStore(engine).list()
    assert (event.tenant, event.scope, event.kind, event.reason) == (
        "bulk",
        "node-a/chat",
        "throttle",
        "NoisyNeighbour",
    )
    assert (event.level_from, event.level_to) == (1.0, 0.5)
    assert event.figures["compute_share"] == pytest.approx(0.9) and event.figures["victim"] == "lc"
    assert "missed its SLO" in event.message
    clock.advance(1)  # the next ingest answer
    assert bulk_quota(services) == Quota(rate_rps=4.0, burst=4.0, max_concurrency=4, kv_share=0.25)
    lc = QuotaBook.from_desired(told(services)).policy("lc").quota("chat")
    assert lc == Quota(rate_rps=10.0, burst=10.0, max_concurrency=4, kv_share=0.75)  # what bulk gave up
    assert told(services).pool_limits == {}  # the shared replica is not capped
    labels = {"tenant": "bulk", "scope": "node-a/chat"}
    assert services.registry.get_sample_value("fleetpilot_isolation_throttle_level", labels) == 0.5
    counted = {"tenant": "bulk", "kind": "throttle"}
    assert services.registry.get_sample_value("fleetpilot_isolation_enforcement_events_total", counted) == 1


@pytest.mark.usefixtures("tenants")
def test_calm_windows_restore_the_tenant_with_an_event(engine: Engine, clock: FakeClock, services: AppServices) -> None:
    loop = enforcer(engine, services=services)
    ticks(loop, engine, clock, NOISY, 3)
    assert ticks(loop, engine, clock, CALM, 2) == []
    assert ticks(loop, engine, clock, CALM, 1) == [ActionKind.RESTORE]
    restore, _throttle = EnforcementStore(engine).list()
    assert (restore.kind, restore.reason, restore.level_from, restore.level_to) == ("restore", "Calm", 0.5, 1.0)
    assert EnforcementStore(engine).levels() == []
    clock.advance(1)
    assert bulk_quota(services) == Quota(rate_rps=8.0, burst=8.0, max_concurrency=8, kv_share=0.5)
    labels = {"tenant": "bulk", "scope": "node-a/chat"}
    assert services.registry.get_sample_value("fleetpilot_isolation_throttle_level", labels) == 1.0


@pytest.mark.usefixtures("tenants")
@pytest.mark.parametrize(
    "usage",
    [
        {"lc": {"tokens_per_second": 10.0}, "bulk": {"tokens_per_second": 90.0}},  # the victim's p99 is missing
        {"lc": {"tokens_per_second": 10.0, "latency_p99_seconds": 0.3}, "bulk": {}},  # bulk's tokens are missing
    ],
)
def test_missing_data_takes_no_action(engine: Engine, clock: FakeClock, usage: dict[str, Any]) -> None:
    loop = enforcer(engine)
    assert set(ticks(loop, engine, clock, usage, 5)) == {ActionKind.HOLD}
    assert EnforcementStore(engine).list() == []


@pytest.mark.usefixtures("tenants")
def test_a_stale_reading_keeps_the_throttle_without_judging(engine: Engine, clock: FakeClock) -> None:
    loop = enforcer(engine)
    ticks(loop, engine, clock, NOISY, 3)
    for _ in range(5):  # the agent stops sending the pool's reading; the node stays up
        clock.advance(30)  # the last reading is older than two windows (20 s)
        with engine.begin() as conn:
            conn.execute(nodes.update().where(nodes.c.id == "node-a").values(last_seen=clock()))
        (hold,) = loop.run(clock())
        assert (hold.kind, hold.reason.value) == (ActionKind.HOLD, "MissingSamples") and "bulk at 0.5" in hold.message
    assert [lv.level for lv in EnforcementStore(engine).levels()] == [0.5]
    assert len(EnforcementStore(engine).list()) == 1


@pytest.mark.usefixtures("tenants")
def test_only_the_lease_holder_acts_and_a_new_leader_keeps_the_throttle(engine: Engine, clock: FakeClock) -> None:
    a, b = enforcer(engine, "server-a"), enforcer(engine, "server-b")
    for _ in range(3):
        clock.advance(10)
        report(engine, clock, NOISY)
        a.run(clock())
        assert b.run(clock()) == []
    assert len(EnforcementStore(engine).list()) == 1
    a.stop()  # server-a shuts down: server-b takes over from the stored level, with fresh streaks
    assert ticks(b, engine, clock, CALM, 3) == [ActionKind.RESTORE]
    assert [e.level_from for e in EnforcementStore(engine).list()] == [0.5, 1.0]


def _pool(pool: str, metrics: dict[str, float], usage: dict[str, Any]) -> PoolOnNode:
    tenants = {name: TenantUsage.model_validate(body) for name, body in usage.items()}
    return PoolOnNode("node-a", pool, 1, 0, 1.0, metrics, tenants=tenants)


def test_observe_uses_tokens_for_text_pools_requests_for_the_others_and_the_pools_slo() -> None:
    lc = Tenant("lc", SloClass.LATENCY_CRITICAL, 1, 0.0, 0.0, {"chat": QuotaSpec(active_thread_percentage=30)})
    text = _pool("chat", {"token_throughput_per_second": 100.0}, NOISY)
    classify = _pool("vision", {}, {"lc": {"requests_per_second": 1.0}, "x": {"requests_per_second": 3.0}})
    untracked = _pool("ext", {}, {})  # an external engine: no tenant usage in any report
    chat, vision = observe([text, classify, untracked], [lc], {"chat": 0.1})
    assert chat.scope == "node-a/chat"
    by_name = {u.tenant: u for u in chat.tenants}
    assert by_name["bulk"].compute_share == pytest.approx(0.9) and by_name["bulk"].slo_class == "standard"
    assert (by_name["lc"].slo_p99_seconds, by_name["lc"].quota_share, by_name["lc"].latency_p99_seconds) == (
        0.1,
        0.3,
        0.3,
    )
    assert {u.tenant: u.compute_share for u in vision.tenants} == {"lc": 0.25, "x": 0.75}
    assert all(u.slo_p99_seconds is None for u in vision.tenants)  # no pool configured: nothing to judge by


@pytest.mark.usefixtures("tenants")
def test_a_stored_report_that_cannot_be_read_leaves_its_node_out_and_the_others_enforced(
    engine: Engine, clock: FakeClock
) -> None:
    """node-b's report, written before ingest refused 400-digit integers, used to fail every tick (OverflowError)."""
    loop = enforcer(engine)
    kinds = []
    for _ in range(3):
        clock.advance(10)
        report(engine, clock, {"bulk": {"tokens_per_second": 10**400}}, node="node-b")
        report(engine, clock, NOISY)
        kinds += [(a.kind, a.scope) for a in loop.run(clock())]
    assert kinds == [(ActionKind.THROTTLE, "node-a/chat")]


@pytest.mark.usefixtures("tenants")
def test_each_tick_publishes_the_tenants_part_and_an_empty_one_once_the_last_tenant_is_gone(
    engine: Engine, clock: FakeClock, services: AppServices
) -> None:
    assert services.desired.for_node("node-a") is None  # nothing published yet: the ingest answer says nothing
    loop = enforcer(engine, services=services)
    ticks(loop, engine, clock, NOISY, 3)
    assert bulk_quota(services).rate_rps == 4.0  # throttled, published by the tick that decided it
    version = services.desired.version(Part.TENANTS)
    for name in ("lc", "bulk"):
        TenantStore(engine).delete(name)
    clock.advance(10)
    assert loop.run(clock()) == []
    assert services.desired.version(Part.TENANTS) == (version or 0) + 1
    part = services.desired.part(Part.TENANTS)
    assert part is not None and part.common.is_empty() and not part.nodes
    assert services.desired.for_node("node-a") is None  # nothing limited any more


def test_a_report_is_read_as_the_node_report_model() -> None:
    """What ``report`` stores is what an agent's report is (the helper cannot drift from the model)."""
    NodeReport.model_validate({"ts": 1.0, "pools": {"chat": {"ready": 1, "tenants": NOISY}}})
