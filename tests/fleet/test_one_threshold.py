"""One liveness threshold for the whole server: ``node_down_after_seconds`` is set once, in the settings, and every
loop and route the composition root builds reads which nodes are up through the one FleetReader made of it."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert, update

from alerting.rule_store import RuleStore
from alerting.rules import RuleKind, RuleSpec
from collector.tables import NO_DEVICE, node_reports, nodes, rollups_1m, series_latest
from fleet.pools import PoolSpec, PoolStore
from fleetpilot.jobs import build_loops
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from isolation.tenants import QuotaSpec, TenantStore
from predictor.store import SubjectKind
from tests.support.clock import FakeClock
from tests.support.rollups import rollup_row, set_watermark
from web.app import create_app
from web.tokens import Role
from wire.control import SloClass

SILENT_SECONDS = 4.0  # down by the default of 3 s, up by the 5 s this server is set to
# lc (latency-critical) has traffic but no p99: the enforcer holds every scope it observes, and says so
USAGE = {"lc": {"tokens_per_second": 10.0}, "bulk": {"tokens_per_second": 90.0}}


def heard_from(engine: Engine, clock: FakeClock, *, first: bool = False) -> None:
    """node-a's last batch SILENT_SECONDS ago, node-b's now; each reports one ready replica of chat and two
    tenants' usage."""
    with engine.begin() as conn:
        for node, at in (("node-a", clock() - SILENT_SECONDS), ("node-b", clock())):
            report: dict[str, Any] = {"ts": at, "pools": {"chat": {"ready": 1, "tenants": USAGE}}}
            if first:
                conn.execute(insert(nodes).values(id=node, first_seen=at - 600, last_seen=at))
                conn.execute(insert(node_reports).values(node_id=node, ts=at, received_at=at, report=report))
                conn.execute(
                    insert(series_latest).values(
                        node_id=node, device=NO_DEVICE, pool="chat", ts=at, token_throughput_per_second=100.0
                    )
                )
            else:
                conn.execute(update(nodes).where(nodes.c.id == node).values(last_seen=at))
                conn.execute(
                    update(node_reports)
                    .where(node_reports.c.node_id == node)
                    .values(ts=at, received_at=at, report=report)
                )
                conn.execute(update(series_latest).where(series_latest.c.node_id == node).values(ts=at))
        if first:
            minute = clock() // 60 * 60
            row = rollup_row("node-a", NO_DEVICE, "chat", minute - 60, request_rate_per_second=5)
            conn.execute(insert(rollups_1m), [row])
            set_watermark(conn, minute)


def test_a_node_four_seconds_silent_with_node_down_after_five_is_up_for_every_loop_and_route(
    database_url: str, engine: Engine, clock: FakeClock
) -> None:
    settings = ServerSettings(database_url=database_url, token_cache_seconds=0, node_down_after_seconds=5.0)
    services = build_services(settings, engine)
    services.clock = clock
    PoolStore(engine).create("chat", PoolSpec(slo_p99_seconds=0.1), now=clock())
    TenantStore(engine).create("lc", SloClass.LATENCY_CRITICAL, {"chat": QuotaSpec(rate_rps=4.0)}, now=clock())
    TenantStore(engine).create("bulk", SloClass.BATCH, {"chat": QuotaSpec(rate_rps=8.0)}, now=clock())
    absent = RuleSpec(name="NoGpuReading", kind=RuleKind.ABSENT, metric="gpu_utilization_ratio")
    RuleStore(engine).create(absent, now=0)
    heard_from(engine, clock, first=True)
    loops = build_loops(services, settings, holder="server-a")
    try:
        # the API and the /metrics exposition
        _, token = services.tokens.create(Role.VIEWER, now=clock(), name="viewer")
        with TestClient(create_app(services)) as client:
            listed = client.get("/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}).json()
            assert [(n["id"], n["status"]) for n in listed["items"]] == [("node-a", "up"), ("node-b", "up")]
        assert services.registry.get_sample_value("fleetpilot_node_up", {"node": "node-a"}) == 1.0
        # the enforcer observes node-a's pool, and tells node-a its one replica's half of the tenants' quotas
        assert [a.scope for a in loops.enforcer.run(clock())] == ["node-a/chat", "node-b/chat"]
        told = services.desired.for_node("node-a")
        assert told is not None and told.tenants["bulk"].quotas["chat"].rate_rps == 4.0
        # the forecast loop counts node-a's ready replica in the pool's capacity
        subjects = loops.forecasts.gather(clock())
        capacity = subjects[(SubjectKind.POOL, "chat", "request_rate_per_second")].pool
        assert capacity is not None and capacity.replicas == 2
        # alert evaluation: node-a is an up node none of whose readings carries the GPU metric
        fired = loops.evaluator.run(clock())
        assert sorted(t.alert.labels["node"] for t in fired) == ["node-a", "node-b"]
        # the controller (once its settling time as a new leader is over) counts node-a's ready replica
        loops.controller.run(clock())
        clock.advance(loops.controller.settings.settle_seconds)
        heard_from(engine, clock)
        assert "chat" in loops.controller.run(clock())
        assert services.registry.get_sample_value("fleetpilot_autoscaler_ready_replicas", {"pool": "chat"}) == 2.0
    finally:
        for stop in loops.on_stop():
            stop()
