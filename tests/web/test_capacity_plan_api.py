"""``GET /api/v1/capacity-plan`` over stored rollups: measured or configured capacity, growth, GPUs, nodes, cost."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from collector.tables import NO_DEVICE, rollups_1m
from tests.support.clock import FakeClock
from tests.support.rollups import rollup_row, set_watermark

Auth = Callable[..., dict[str, str]]
DAYS = 4


def seed_demand(engine: Engine, clock: FakeClock, pool: str, peak: float) -> None:
    """Four days of a daily cycle between peak/4 and ``peak`` requests/s, flat from day to day."""
    end = clock() // 60 * 60
    start = end - DAYS * 86_400
    rows = []
    for i in range(DAYS * 1440):
        level = peak * (0.625 - 0.375 * math.cos(2 * math.pi * i / 1440))
        rows.append(rollup_row("node-a", NO_DEVICE, pool, start + i * 60, request_rate_per_second=level))
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
        set_watermark(conn, end)


def test_plan_from_configured_capacity_with_cost(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    admin = auth("admin")
    pool = {"name": "chat", "replica_capacity": 40.0, "gpus_per_replica": 2}
    assert client.post("/api/v1/pools", json=pool, headers=admin).status_code == 201
    seed_demand(engine, clock, "chat", peak=400.0)
    answer = client.get("/api/v1/capacity-plan", params={"gpu_hour_cost": 2.0, "headroom": 0.0}, headers=auth("viewer"))
    assert answer.status_code == 200, answer.text
    (plan,) = answer.json()["items"]
    assert plan["capacity_source"] == "configured" and plan["per_replica_capacity"] == 40.0
    assert plan["current_peak"] == pytest.approx(400.0, rel=0.01)
    assert plan["growth_source"] == "estimated" and abs(plan["growth_per_month"]) < 0.02  # flat days: no growth
    week, month = plan["horizons"]
    assert week["name"] == "next_week" and month["name"] == "next_month"
    assert week["replicas"] == math.ceil(week["peak_demand"] / 40.0)
    assert week["gpus"] == 2 * week["replicas"] and week["nodes"] == math.ceil(week["gpus"] / 8)
    assert week["cost"] == pytest.approx(week["gpus"] * 2.0 * 7 * 24)


def test_rule_of_thumb_without_measured_capacity_and_given_growth(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    client.post("/api/v1/pools", json={"name": "chat"}, headers=auth("admin"))
    seed_demand(engine, clock, "chat", peak=1000.0)
    body = client.get(
        "/api/v1/capacity-plan",
        params={"pool": "chat", "growth_per_month": 0.5, "headroom": 0.0},
        headers=auth("viewer"),
    ).json()
    (plan,) = body["items"]
    assert plan["capacity_source"] == "rule_of_thumb" and plan["per_replica_capacity"] == 125.0
    assert plan["growth_source"] == "given"
    month = plan["horizons"][1]
    assert month["peak_demand"] == pytest.approx(1.5 * plan["current_peak"])
    assert month["gpus"] == math.ceil(month["peak_demand"] / 125.0)  # 8 GPUs per 1,000 requests/s
    assert month["cost"] is None  # no GPU price configured or given


def test_pool_without_demand_is_skipped_with_the_reason(client: TestClient, auth: Auth) -> None:
    client.post("/api/v1/pools", json={"name": "idle"}, headers=auth("admin"))
    body = client.get("/api/v1/capacity-plan", headers=auth("viewer")).json()
    assert body["items"] == [] and "idle" in body["skipped"]
    assert client.get("/api/v1/capacity-plan", params={"pool": "nope"}, headers=auth("viewer")).status_code == 404
    bad = client.get("/api/v1/capacity-plan", params={"growth_per_month": -2}, headers=auth("viewer"))
    assert bad.status_code == 422
