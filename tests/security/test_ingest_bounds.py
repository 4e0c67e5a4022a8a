"""Issue 15, the ingest side: what one agent sends is bounded where it enters, and the ingest answer's heavy work
runs off the event loop. Each test replays the request of the attack and fails without the fix."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

import web.routes.ingest
from collector.batch import SampleBatch
from collector.ingest import SampleWriter
from collector.pool_bound import PoolBound
from collector.tables import devices, node_reports, replica_reports, samples
from fleet.desired.board import DesiredBoard
from fleet.pools import PoolSpec, PoolStore
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from web.app import create_app
from web.services import AppServices

Auth = Callable[..., dict[str, str]]


def stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(samples)) or 0)


def refused(answer: Any) -> tuple[int | None, str]:
    """(sample index, field) of the first problem of a 422 answer."""
    assert answer.status_code == 422, answer.text
    problem = answer.json()["error"]["errors"][0]
    return problem["sample"], problem["field"]


def on_the_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def pools_refused(answer: Any) -> list[str]:
    """The pools whose samples a 200 answer refused (issue 35 #12: the rest of the batch is stored)."""
    assert answer.status_code == 200, answer.text
    return [pool for refusal in answer.json()["refused"] for pool in refusal["pools"]]


def refused_samples(services: AppServices) -> float | None:
    labels = {"outcome": "too_many_pools"}
    return services.registry.get_sample_value("fleetpilot_collector_ingested_samples_total", labels)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"replicas_ready": 3_000_000}, "extra.replicas_ready"),
        ({"replicas_ready": 10**400}, "extra.replicas_ready"),
        ({"replicas_ready": 1, "replicas_starting": 256}, "extra.replicas_ready"),  # 257 together
        ({"replicas_starting": -1}, "extra.replicas_starting"),
        ({"replicas_ready": 2.5}, "extra.replicas_ready"),
        ({"tenants": {f"t{i}": {"requests_per_second": 1.0} for i in range(257)}}, "extra.tenants"),
    ],
    ids=["three million", "400 digits", "ready and starting past 256", "negative", "not whole", "257 tenants"],
)
def test_finding_1_a_replica_count_past_the_node_bound_is_refused_and_nothing_stored(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, extra: dict[str, Any], field: str
) -> None:
    bad = {**pool_sample(2, clock()), "extra": extra}
    body = {"node_id": "node-a", "samples": [gpu_sample(1, clock()), bad]}
    answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert refused(answer) == (1, field)
    assert stored(engine) == 0


@pytest.mark.parametrize(
    ("report", "field"),
    [
        ({"pools": {"chat": {"ready": 3_000_000}}}, "report.pools.chat.ready"),
        ({"pools": {"chat": {"ready": 200, "starting": 50, "draining": 7}}}, "report.pools.chat.ready"),  # 257
        ({"pools": {"chat": {"ready": 200}, "embed": {"ready": 57}}}, "report.pools.chat.ready"),  # node: 257
        ({"pools": {"chat": {"ready": -1}}}, "report.pools.chat.ready"),
        ({"pools": {"chat": {"ready": 2.5}}}, "report.pools.chat.ready"),
        ({"pools": {"chat": {"ready": 1, "starting": True}}}, "report.pools.chat.starting"),
        (
            {"pools": {"chat": {"ready": 1, "tenants": {f"t{i}": {"requests_per_second": 1.0} for i in range(257)}}}},
            "report.pools.chat.tenants",
        ),
        ({"ts": 1e12, "pools": {"chat": {"ready": 1}}}, "report.ts"),  # it would win over every later report
    ],
    ids=[
        "three million",
        "one pool past 256",
        "the node past 256",
        "negative",
        "not whole",
        "a bool",
        "257 tenants",
        "far future",
    ],
)
def test_finding_1_a_reports_replicas_past_the_node_bound_are_refused_naming_the_field_and_nothing_stored(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, report: dict[str, Any], field: str
) -> None:
    body = {"node_id": "node-a", "samples": [pool_sample(1, clock())], "report": {"ts": clock(), **report}}
    answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert refused(answer) == (None, field)
    assert stored(engine) == 0
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(node_reports)) == 0


def test_finding_1_a_report_at_the_bound_is_accepted(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    report = {"ts": clock(), "pools": {"chat": {"ready": 200, "starting": 50}, "embed": {"ready": 6}}}
    body = {"node_id": "node-a", "samples": [pool_sample(1, clock())], "report": report}
    assert client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a")).status_code == 200
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(replica_reports)) == 2


def test_finding_1_the_desired_state_is_computed_off_the_event_loop(
    services: AppServices, auth: Auth, clock: FakeClock
) -> None:
    where: list[bool] = []

    class Watched(DesiredBoard):
        def for_node_json(self, node_id: str) -> bytes:
            where.append(on_the_event_loop())
            return super().for_node_json(node_id)

    services.desired = Watched(services.engine)
    good = {**pool_sample(1, clock()), "extra": {"replicas_ready": 256}}  # at the bound: accepted
    with TestClient(create_app(services)) as client:
        answer = client.post(
            "/api/v1/ingest", json={"node_id": "node-a", "samples": [good]}, headers=auth("agent", "node-a")
        )
    assert answer.status_code == 200, answer.text
    assert where == [False]


@pytest.mark.parametrize(
    ("sample", "field"),
    [
        ({**gpu_sample(2, 0.0), "extra": {"host_cpu_ratio": 10**400}}, "extra.host_cpu_ratio"),
        ({**gpu_sample(2, 0.0), "extra": {"ecc": [1, {"deep": -(10**309)}]}}, "extra.ecc[1].deep"),
        ({**gpu_sample(2, 0.0), "seq": 2**63}, "seq"),
        (gpu_sample(2, 0.0, gpu_memory_used_bytes=10**400), "metrics.gpu_memory_used_bytes"),
        (gpu_sample(2, 0.0, gpu_power_watts=1.7e308), "metrics.gpu_power_watts"),  # two of them overflow a sum
    ],
    ids=["400-digit extra", "nested huge extra", "seq of 2**63", "400-digit metric", "1.7e308 metric"],
)
def test_finding_2_a_number_no_column_holds_is_refused_naming_its_field(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock, sample: dict[str, Any], field: str
) -> None:
    body = {"node_id": "node-a", "samples": [gpu_sample(1, clock()), {**sample, "ts": clock()}]}
    answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert refused(answer) == (1, field)
    assert stored(engine) == 0


def test_finding_2_a_gpu_memory_of_2_63_bytes_is_refused_not_a_500(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    gpu = {"index": 0, "name": "H200", "memory_total_bytes": 2**63}
    body = {"node_id": "node-a", "samples": [gpu_sample(1, clock())], "inventory": {"gpus": [gpu]}}
    answer = client.post("/api/v1/ingest", json=body, headers=auth("agent", "node-a"))
    assert refused(answer) == (None, "inventory.gpus.0.memory_total_bytes")
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(devices)) == 0
    assert stored(engine) == 0


def test_finding_6_too_many_samples_are_refused_before_any_is_built_and_parsing_is_off_the_loop(
    services: AppServices, auth: Auth, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Samples past the limit are not even looked at: 101 empty objects are refused for their number (the code of
    today, 422 on ``samples``), not for 101 × 3 missing fields that only building them finds."""
    services.settings.ingest_max_samples = 100
    decode, where = web.routes.ingest._decode, []

    def decode_and_note(*args: Any, **kwargs: Any) -> Any:
        where.append(on_the_event_loop())
        return decode(*args, **kwargs)

    monkeypatch.setattr(web.routes.ingest, "_decode", decode_and_note)
    body = json.dumps({"node_id": "node-a", "samples": [{}] * 101})
    with TestClient(create_app(services)) as client:
        answer = client.post("/api/v1/ingest", content=body, headers=auth("agent", "node-a"))
    assert refused(answer) == (None, "samples")
    assert "101 samples, more than the limit of 100" in answer.json()["error"]["message"]
    assert where == [False]
    assert stored(engine) == 0


def test_finding_11_pools_past_the_bound_are_refused_and_counted_and_configured_ones_always_allowed(
    services: AppServices, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    services.settings.ingest_max_pools_per_node = 3
    PoolStore(engine).create("chat", PoolSpec(), now=clock())
    headers = auth("agent", "node-a")
    seq = iter(range(1, 100))

    def push(*pools: str) -> Any:
        body = {"node_id": "node-a", "samples": [pool_sample(next(seq), clock(), pool=p) for p in pools]}
        return client.post("/api/v1/ingest", json=body, headers=headers)

    with TestClient(create_app(services)) as client:
        assert push("p0", "p1").status_code == 200
        assert push("p1", "p2", "chat").status_code == 200  # three invented pools, and a configured one
        assert pools_refused(push("p0", "p3", "p4")) == ["p3", "p4"]  # p3 would be a fourth; p0 is stored
        assert stored(engine) == 6
        assert push("p2", "chat").status_code == 200  # pools it already reports, and configured ones, still go
    assert refused_samples(services) == 2


def test_finding_11_the_pools_a_report_names_count_toward_the_bound_with_those_of_the_samples(
    services: AppServices, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    """A report may name a pool before any of its replicas sends a sample (all starting): it is a pool of the node
    all the same, so 10,000 pools in reports are refused as 10,000 in samples are."""
    services.settings.ingest_max_pools_per_node = 2
    headers = auth("agent", "node-a")

    def push(seq: int, sampled: str, *reported: str) -> Any:
        report = {"ts": clock(), "pools": {p: {"ready": 0, "starting": 1} for p in reported}}
        body = {"node_id": "node-a", "samples": [pool_sample(seq, clock(), pool=sampled)], "report": report}
        return client.post("/api/v1/ingest", json=body, headers=headers)

    with TestClient(create_app(services)) as client:
        assert push(1, "p0", "p0", "p1").status_code == 200
        clock.advance(1)  # a newer report replaces the node's stored one
        assert pools_refused(push(2, "p0", "p0", "p2")) == ["p2"]  # the report's p2 is left out, its sample stored
        with engine.connect() as conn:
            report = conn.scalar(select(node_reports.c.report))
        assert report is not None and sorted(report["pools"]) == ["p0"]
        assert push(3, "p1", "p1").status_code == 200  # what it reported before still goes
    assert stored(engine) == 3


def test_finding_11_the_bound_holds_across_servers_that_remember_what_they_saw(
    engine: Engine, clock: FakeClock
) -> None:
    """Each server remembers the pools a node reported through it; pools it never saw are read from the database, so a
    node cannot pass the bound by spreading new pools over two servers behind one load balancer."""
    bound = PoolBound(2, lambda: [])
    first, second = (SampleWriter(engine, late_after_seconds=600) for _ in range(2))

    def batch(seq: int, *pools: str) -> SampleBatch:
        return SampleBatch.parse(
            {"node_id": "node-a", "samples": [pool_sample(seq + i, clock(), pool=p) for i, p in enumerate(pools)]}
        )

    first.write_batch(batch(1, "p0"), received_at=clock(), pools=bound)
    second.write_batch(batch(10, "p1"), received_at=clock(), pools=bound)  # the node now reports two
    first.write_batch(batch(20, "p0"), received_at=clock(), pools=bound)  # one the first server saw: no read
    assert [r.pools for r in first.write_batch(batch(30, "p2"), received_at=clock(), pools=bound).refused] == [["p2"]]
    assert stored(engine) == 3
