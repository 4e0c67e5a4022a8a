"""A fleet seen only through a team's Prometheus (remote write): its nodes and pool reach every loop as an agent's
would — alerts fire on its series, the forecast loop counts its replica, the controller decides for a dry-run pool
and records it — and no replica is placed on a node that has no agent to run it."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from alerting.rule_store import RuleStore
from alerting.rules import Op, RuleKind, RuleSpec
from collector.rollups import RollupJob
from fleet.desired.pools import placements
from fleet.pools import Mode, PoolSpec, PoolStore
from fleet.scaling_log import scaling_events
from fleetpilot.jobs import build_loops
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from predictor.store import SubjectKind
from tests.support.clock import FakeClock
from tests.support.remote_write import REMOTE_WRITE_HEADERS, named, write_request
from web.app import create_app
from web.tokens import Role

VLLM = {"model_name": "llama-8b", "engine": "0", "node": "gpu-1", "job": "vllm", "instance": "10.0.0.1:8000"}
GPU = {"gpu": "0", "Hostname": "gpu-1", "job": "dcgm"}


def test_a_pool_seen_only_through_remote_write_gets_alerts_forecast_inputs_and_dry_run_decisions(
    database_url: str, engine: Engine, clock: FakeClock
) -> None:
    settings = ServerSettings(database_url=database_url, token_cache_seconds=0)
    services = build_services(settings, engine)
    services.clock = clock
    PoolStore(engine).create("llama-8b", PoolSpec(mode=Mode.DRY_RUN, replica_capacity=10.0), now=clock())
    RuleStore(engine).create(
        RuleSpec(name="QueueBuilding", kind=RuleKind.THRESHOLD, metric="queue_depth_requests", op=Op.GT, threshold=5),
        now=0,
    )
    _, token = services.tokens.create(Role.REMOTE_WRITE, now=clock())
    start = clock() - 60
    times = [start + 15 * k for k in range(5)]
    series = [
        (named("vllm:num_requests_waiting", **VLLM), [(t, 9.0) for t in times]),
        (
            named("vllm:request_success_total", finished_reason="stop", **VLLM),
            [(t, 450.0 * k) for k, t in enumerate(times)],
        ),
        (named("DCGM_FI_DEV_GPU_UTIL", **GPU), [(t, 95.0) for t in times]),
    ]
    with TestClient(create_app(services)) as client:
        answer = client.post(
            "/api/v1/write",
            content=write_request(series),
            headers={"Authorization": f"Bearer {token}", **REMOTE_WRITE_HEADERS},
        )
        assert answer.status_code == 204, answer.text
    loops = build_loops(services, settings, holder="server-a")
    try:
        fired = loops.evaluator.run(clock())
        assert [(t.alert.labels["node"], t.alert.labels["pool"]) for t in fired] == [("gpu-1", "llama-8b")]
        RollupJob(engine, lookback_seconds=settings.rollup_lookback_seconds).run(clock())
        subjects = loops.forecasts.gather(clock())
        capacity = subjects[(SubjectKind.POOL, "llama-8b", "request_rate_per_second")].pool
        assert capacity is not None
        assert capacity.replicas == 1  # the node's vLLM is one ready replica, as an external engine an agent reads
        loops.controller.run(clock())
        clock.advance(loops.controller.settings.settle_seconds)
        assert "llama-8b" in loops.controller.run(clock())
        with engine.connect() as conn:
            events = conn.execute(select(scaling_events).where(scaling_events.c.pool == "llama-8b")).mappings().all()
            placed = conn.execute(select(placements)).all()
        assert events and {e["outcome"] for e in events} == {"dry_run"}
        decided = events[-1]
        assert decided["from_replicas"] == 1  # its one ready replica, as it stands
        # 450 successes per 15 s scrape → 30 req/s against 10 per replica: up, held to the step limit
        assert decided["inputs"]["demand"] == 30.0 and decided["to_replicas"] == 3
        assert placed == []  # gpu-1 has no agent: nothing is placed on it
    finally:
        for stop in loops.on_stop():
            stop()
