"""Issue 35, items 12 and "old samples": a sample past a bound of its node is refused by itself, named and counted in
the ingest answer, and the rest of its batch is stored. Before, one pool too many refused every sample of every push
(422): the node showed down and its whole spool went to ``rejected/``; and a sample from any past re-rolled its
minute's rollup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import Engine, func, select

from collector.tables import node_reports, rollup_backlog, samples
from fleet.pools import PoolSpec, PoolStore
from fleetpilot.settings import ServerSettings
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from web.app import create_app
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
DAY_S = 86_400.0


def count(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(table)) or 0)


def stored_pools(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(select(samples.c.pool).distinct()))


def samples_counted(services: AppServices, outcome: str) -> float | None:
    return services.registry.get_sample_value("fleetpilot_collector_ingested_samples_total", {"outcome": outcome})


def test_only_the_samples_of_the_pools_past_the_bound_are_refused_and_the_node_stays_up(
    services: AppServices, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    services.settings.ingest_max_pools_per_node = 3
    PoolStore(engine).create("chat", PoolSpec(), now=clock())  # configured: never counts toward the bound
    pools = ["p0", "p1", "p2", "p3", "p4", "chat"]
    body = {
        "node_id": "node-a",
        "samples": [gpu_sample(1, clock())] + [pool_sample(2 + i, clock(), pool=p) for i, p in enumerate(pools)],
        "report": {"ts": clock(), "pools": {p: {"ready": 1} for p in pools}},
    }
    with TestClient(create_app(services)) as client:
        answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
        node = client.get("/api/v1/nodes/node-a", headers=auth("viewer")).json()
    assert answer.status_code == 200, answer.text
    ack = answer.json()
    assert (ack["accepted"], ack["duplicates"]) == (5, 0)
    [refusal] = ack["refused"]
    assert (refusal["reason"], refusal["samples"], refusal["pools"]) == ("too_many_pools", 2, ["p3", "p4"])
    assert "ingest_max_pools_per_node (3)" in refusal["detail"]
    assert count(engine, samples) == 5 and stored_pools(engine) == {"", "p0", "p1", "p2", "chat"}
    with engine.connect() as conn:
        report = conn.scalar(select(node_reports.c.report))
    assert report is not None and sorted(report["pools"]) == [
        "chat",
        "p0",
        "p1",
        "p2",
    ]  # the report's extra pools are left out too
    assert node["status"] == "up"
    assert samples_counted(services, "too_many_pools") == 2


def test_the_bound_refuses_the_same_pools_push_after_push(
    services: AppServices, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    services.settings.ingest_max_pools_per_node = 2
    headers = auth("agent", "node-a")
    seq = iter(range(1, 100))

    def push(*pools: str) -> dict[str, Any]:
        body = {"node_id": "node-a", "samples": [pool_sample(next(seq), clock(), pool=p) for p in pools]}
        answer = client.post("/api/v1/ingest", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    with TestClient(create_app(services)) as client:
        assert "refused" not in push("p0", "p1")  # within its bounds: the answer of the contract's example
        assert [r["pools"] for r in push("p2", "p0", "p1")["refused"]] == [["p2"]]
        assert [r["pools"] for r in push("p1", "p2")["refused"]] == [["p2"]]  # p0 and p1 stay the node's pools
    assert stored_pools(engine) == {"p0", "p1"} and count(engine, samples) == 5


def test_a_sample_older_than_the_bound_is_refused_alone_and_counted(
    settings: ServerSettings, services: AppServices, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    settings.ingest_max_sample_age_seconds = 3600.0  # the services' settings
    now = clock()
    old = [pool_sample(i, now - 13 * DAY_S + 60 * i) for i in range(1, 6)]
    body = {"node_id": "node-a", "samples": [*old, pool_sample(10, now - 1800), pool_sample(11, now)]}
    with TestClient(create_app(services)) as client:
        answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert answer.status_code == 200, answer.text
    ack = answer.json()
    assert ack["accepted"] == 2
    [refusal] = ack["refused"]
    assert (refusal["reason"], refusal["samples"]) == ("too_old", 5)
    assert "ingest_max_sample_age_seconds (3600 s)" in refusal["detail"]
    assert count(engine, samples) == 2
    with engine.connect() as conn:
        backlog = list(conn.scalars(select(rollup_backlog.c.bucket)))
    assert all(bucket >= now - 3600 - 60 for bucket in backlog)  # no minute past the bound is rolled again
    assert samples_counted(services, "too_old") == 5


def test_by_default_a_sample_is_taken_back_to_the_raw_retention_window_and_no_further(
    settings: ServerSettings, services: AppServices, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    """One push of 2,000 samples a minute apart, back 33 hours: only those within the 24 h of raw retention (less its
    10-minute margin) are stored, and the rollup backlog holds at most one entry per minute of that window."""
    now = clock()
    body = {"node_id": "node-a", "samples": [pool_sample(i + 1, now - 60.0 * i) for i in range(2000)]}
    with TestClient(create_app(services)) as client:
        answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert answer.status_code == 200, answer.text
    window_minutes = int(settings.raw_retention_hours * 60) - 10
    assert answer.json()["accepted"] == window_minutes + 1  # now, and one a minute back to exactly 23 h 50 min
    assert count(engine, rollup_backlog) <= window_minutes + 1


def test_a_sample_age_bound_past_the_raw_retention_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match=r"ingest_max_sample_age_seconds: 172800 s is longer than the raw"):
        ServerSettings(ingest_max_sample_age_seconds=2 * DAY_S, raw_retention_hours=24)
    assert ServerSettings(raw_retention_hours=6).ingest_sample_age_limit_seconds == 6 * 3600 - 600
    assert ServerSettings(ingest_max_sample_age_seconds=300).ingest_sample_age_limit_seconds == 300
