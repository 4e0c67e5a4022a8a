"""The forecast loop on a real database: inputs from rollups, saturation against live replicas, stale on failure."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from collector.tables import (
    NO_DEVICE,
    NO_POOL,
    devices,
    node_reports,
    nodes,
    replica_reports,
    rollups_1m,
    series_latest,
)
from collector.tables import samples as raw_samples
from fleet.pools import PoolSpec, PoolStore
from predictor.base import Forecast, ForecastError, History
from predictor.capacity import PoolCapacity, ReplicaCapacity
from predictor.cycle import forecast_cycle
from predictor.loop import ForecastJob, ForecastSettings
from predictor.store import ForecastStore, SubjectKind
from tests.support.clock import FakeClock
from tests.support.fleet_reader import fleet_reader
from tests.support.rollups import rollup_row, set_watermark

Auth = Callable[..., dict[str, str]]
MINUTE = 60.0
HOURS = 3
GIB = float(1 << 30)


def _minute(clock: FakeClock) -> float:
    return clock() // MINUTE * MINUTE


def seed(engine: Engine, clock: FakeClock, demand: Callable[[int], float | None], *, replicas: int = 2) -> None:
    """Three hours of one-minute rollups of pool ``chat`` on node-a (``demand(i)`` None = a missing minute),
    a GPU on it filling up, the rollup watermark at the open minute, and node-a up with ``replicas`` ready."""
    end = _minute(clock)
    start = end - HOURS * 3600
    rows: list[dict[str, Any]] = []
    steps = int(HOURS * 3600 / MINUTE)
    for i in range(steps):
        bucket = start + i * MINUTE
        value = demand(i)
        if value is not None:
            rows.append(rollup_row("node-a", NO_DEVICE, "chat", bucket, request_rate_per_second=value))
        used = (40 + 40 * i / steps) * GIB  # 40 → 80 GiB of an 80 GiB GPU: exhaustion ahead
        rows.append(rollup_row("node-a", 0, NO_POOL, bucket, gpu_memory_used_bytes=used))
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
        set_watermark(conn, end)
        conn.execute(insert(nodes).values(id="node-a", first_seen=start, last_seen=clock()))
        conn.execute(
            insert(devices).values(
                node_id="node-a", index=0, name="H100", memory_total_bytes=int(80 * GIB), updated_at=start
            )
        )
        conn.execute(insert(series_latest).values(node_id="node-a", device=NO_DEVICE, pool="chat", ts=clock()))
        report = {"ts": clock(), "pools": {"chat": {"ready": replicas}}}  # wire.control.NodeReport
        conn.execute(insert(node_reports).values(node_id="node-a", ts=clock(), received_at=clock(), report=report))


def job(engine: Engine, **kwargs: Any) -> ForecastJob:
    return ForecastJob(engine, ForecastSettings(model="naive"), fleet=fleet_reader(engine), **kwargs)


def test_pool_demand_forecast_is_stored_with_points_inputs_and_saturation(engine: Engine, clock: FakeClock) -> None:
    PoolStore(engine).create("chat", PoolSpec(replica_capacity=30.0), now=clock())
    seed(engine, clock, lambda i: 55.0)  # two ready replicas of 30/s: 60/s of capacity, demand 55/s flat
    report = job(engine).run(clock())
    assert report.failed == 0 and report.good == 2  # the pool and the GPU (no KV-cache series reported)
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.good is not None and not stored.stale
    good = stored.good
    origin = _minute(clock) - MINUTE  # the last rolled-up minute
    assert good.origin_ts == origin and good.input_end == _minute(clock)
    assert good.input_start == _minute(clock) - HOURS * 3600  # from the first minute the pool reported
    assert [p.ts for p in good.points] == [origin + (k + 1) * MINUTE for k in range(15)]
    assert all(p.lo <= p.yhat <= p.hi for p in good.points)
    assert good.points[0].yhat == pytest.approx(55.0)
    assert good.saturation is not None
    assert good.saturation["capacity"] == 60.0 and good.saturation["replicas"] == 2
    assert good.saturation["capacity_source"] == "configured"
    assert 0.0 <= good.saturation["probability"] < 0.5  # 55 of 60, flat: not likely to saturate


def test_fewer_replicas_make_saturation_likely(engine: Engine, clock: FakeClock) -> None:
    PoolStore(engine).create("chat", PoolSpec(replica_capacity=30.0), now=clock())
    seed(engine, clock, lambda i: 55.0, replicas=1)  # one replica: 30/s against 55/s
    job(engine).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.good is not None and stored.good.saturation is not None
    assert stored.good.saturation["probability"] > 0.9
    assert stored.good.saturation["eta_seconds"] == MINUTE  # already over at the first step


def test_a_gap_at_the_origin_is_not_read_as_zero_load(engine: Engine, clock: FakeClock) -> None:
    seed(engine, clock, lambda i: None if i >= HOURS * 60 - 10 else 40.0)  # agent away for the last 10 minutes
    job(engine).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.good is not None
    assert stored.good.points[0].yhat == pytest.approx(40.0)  # the last value seen, never 0
    # An unconfigured pool with no measured capacity: no capacity, no probability — absent, not 0.
    assert stored.good.saturation is not None and stored.good.saturation["probability"] is None


def test_gpu_memory_filling_up_predicts_exhaustion(engine: Engine, clock: FakeClock) -> None:
    seed(engine, clock, lambda i: 10.0)
    ForecastJob(engine, ForecastSettings(model="auto"), fleet=fleet_reader(engine)).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.DEVICE, "node-a/0")
    assert stored is not None and stored.good is not None and stored.good.saturation is not None
    assert stored.good.saturation["capacity"] == pytest.approx(0.95 * 80 * GIB)
    assert stored.good.points[-1].yhat > stored.good.points[0].yhat  # the trend carries on


def test_a_failing_forecaster_keeps_the_last_good_forecast_marked_stale(engine: Engine, clock: FakeClock) -> None:
    seed(engine, clock, lambda i: 20.0)
    job(engine).run(clock())

    def broken(histories: Mapping[str, History], h: int, model: str) -> dict[str, Forecast | ForecastError]:
        return {key: ForecastError("the model diverged") for key in histories}

    clock.advance(MINUTE)
    report = job(engine, cycle=broken).run(clock())
    assert report.good == 0 and report.failed == 2
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.stale and stored.error == "the model diverged"
    assert stored.good is not None and stored.good.generated_at == clock() - MINUTE  # the last good one, kept
    assert stored.attempted_at == clock()


def test_a_cycle_past_its_timeout_marks_every_forecast_stale(engine: Engine, clock: FakeClock) -> None:
    seed(engine, clock, lambda i: 20.0)
    release = threading.Event()

    def wedged(histories: Mapping[str, History], h: int, model: str) -> Mapping[str, Forecast | ForecastError]:
        release.wait(10)
        return forecast_cycle(histories, h, model)

    slow = ForecastJob(
        engine, ForecastSettings(model="naive", timeout_seconds=0.2), fleet=fleet_reader(engine), cycle=wedged
    )
    try:
        first = slow.run(clock())
        assert first.good == 0 and first.failed == 2
        second = slow.run(clock())  # the wedged worker still runs: no second thread, still stale
        assert second.skipped == "previous cycle still running"
        stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
        assert stored is not None and stored.stale and stored.good is None
        assert "previous forecast cycle is still running" in (stored.error or "")
    finally:
        release.set()
        slow.close()


def test_no_rollups_yet_is_a_skipped_cycle(engine: Engine, clock: FakeClock) -> None:
    report = job(engine).run(clock())
    assert report.skipped == "no rolled-up history yet" and report.good == report.failed == 0


def test_forecast_api_serves_the_contract_shape(
    engine: Engine, clock: FakeClock, client: TestClient, auth: Auth
) -> None:
    PoolStore(engine).create("chat", PoolSpec(replica_capacity=30.0), now=clock())
    seed(engine, clock, lambda i: 40.0 + 5 * np.sin(i / 10))
    viewer = auth("viewer")
    assert client.get("/api/v1/pools/chat/forecast", headers=viewer).status_code == 404  # the loop has not run
    ForecastJob(engine, ForecastSettings(), fleet=fleet_reader(engine)).run(clock())  # the default model: auto
    body = client.get("/api/v1/pools/chat/forecast", headers=viewer).json()
    assert {"generated_at", "horizon_seconds", "points", "saturation"} <= set(body)
    assert body["horizon_seconds"] == 900 and len(body["points"]) == 15
    assert {"ts", "yhat", "lo", "hi"} <= set(body["points"][0])
    assert len(body["points"][0]["quantiles"]) == len(body["levels"]) and 0.99 in body["levels"]
    assert body["model"] == "auto[prior]" and body["selection"]["chosen"] == "prior"  # nothing scored yet
    assert {"probability", "eta_seconds", "capacity"} <= set(body["saturation"])
    assert body["stale"] is False and body["inputs"]["end"] == _minute(clock)
    node = client.get("/api/v1/nodes/node-a/forecast", headers=viewer).json()
    assert [f["subject"] for f in node["items"]] == ["node-a/0"]
    assert client.get("/api/v1/pools/other/forecast", headers=viewer).status_code == 404


def test_per_replica_capacity_is_learned_from_raw_samples(engine: Engine, clock: FakeClock) -> None:
    """Two replicas per node; latency stays at 0.2 s up to 40 requests/s per replica and 3 s past it."""
    PoolStore(engine).create("chat", PoolSpec(slo_p99_seconds=1.0), now=clock())
    seed(engine, clock, lambda i: 60.0)
    rows = []
    for seq in range(0, 2000, 5):  # the learner reads every fifth sequence number
        per_replica = 10.0 + 50.0 * (seq % 400) / 400  # 10 → 60 requests/s per replica
        row: dict[str, Any] = {c.name: None for c in raw_samples.columns}
        row.update(
            node_id="node-a",
            seq=seq,
            ts=clock() - 1800 + seq * 0.5,
            device=NO_DEVICE,
            pool="chat",
            request_rate_per_second=2 * per_replica,
            request_latency_p99_seconds=0.2 if per_replica <= 40 else 3.0,
        )
        rows.append(row)
    ready = {"node_id": "node-a", "pool": "chat", "ts": clock() - 1801, "ready": 2, "starting": 0, "draining": 0}
    with engine.begin() as conn:
        conn.execute(insert(raw_samples), rows)
        conn.execute(insert(replica_reports).values(**ready))  # the node's report: two ready all along
    job(engine).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.good is not None and stored.good.saturation is not None
    context = stored.good.saturation
    assert context["capacity_source"] == "measured"
    assert 36.0 <= context["per_replica_capacity"] <= 40.0  # the knee, never above it
    assert context["capacity"] == pytest.approx(2 * context["per_replica_capacity"])
    learned = ReplicaCapacity(context["per_replica_capacity"], "measured")
    assert stored.good.pool_capacity == PoolCapacity(2, learned) and stored.learned_capacity == learned


def test_a_subject_failing_for_too_little_history_before_its_first_forecast_is_warming_up(
    engine: Engine, clock: FakeClock
) -> None:
    seed(engine, clock, lambda i: 20.0)

    def short(histories: Mapping[str, History], h: int, model: str) -> dict[str, Forecast | ForecastError]:
        return {key: forecast_cycle({key: History(np.array([np.nan]), MINUTE)}, h, "auto")[key] for key in histories}

    job(engine, cycle=short).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.stale and stored.warming_up and "at least 1 observed" in (stored.error or "")
    clock.advance(MINUTE)
    job(engine).run(clock())  # the first good forecast: warmed up
    clock.advance(MINUTE)
    job(engine, cycle=short).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.stale and stored.short_history and not stored.warming_up  # failing now


def test_a_pool_whose_capacity_cannot_be_learned_says_why(engine: Engine, clock: FakeClock) -> None:
    PoolStore(engine).create("chat", PoolSpec(), now=clock())  # no replica_capacity, and no raw samples to learn from
    seed(engine, clock, lambda i: 40.0)
    job(engine).run(clock())
    stored = ForecastStore(engine).get(SubjectKind.POOL, "chat")
    assert stored is not None and stored.good is not None and stored.good.saturation is not None
    assert stored.good.saturation["per_replica_capacity"] is None
    assert "only 0 moments" in stored.good.saturation["capacity_missing"]
    assert stored.good.pool_capacity is not None and "30 needed" in (stored.good.pool_capacity.missing or "")
