"""The node report on the server: parsed in one place (an old agent's extras make the same report), stored in the
ingest transaction with the newest winning, and read back as each (node, pool) of the fleet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert, select

from collector.node_reports import store_report
from collector.registry import PoolOnNode, pools_on_up_nodes
from collector.series import pool_replica_history
from collector.tables import NO_DEVICE, node_reports, nodes, replica_reports, series_latest
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from wire.control import NodeReport, TenantUsage
from wire.samples import IngestBatch, node_report

Auth = Callable[..., dict[str, str]]
USAGE = {"acme": {"requests_per_second": 3.5, "tokens_per_second": 420.0, "latency_p99_seconds": 0.8}}


def chat(ready: int, starting: int = 0, **more: Any) -> dict[str, Any]:
    return {"ready": ready, "starting": starting, **more}


def push(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> None:
    answer = client.post("/api/v1/ingest", json={"node_id": "node-a", **body}, headers=headers)
    assert answer.status_code == 200, answer.text


def on_nodes(engine: Engine, clock: FakeClock) -> dict[tuple[str, str], PoolOnNode]:
    with engine.connect() as conn:
        return {(p.node_id, p.pool): p for p in pools_on_up_nodes(conn, now=clock(), down_after_seconds=3.0)}


def test_a_report_is_stored_with_a_replica_row_per_pool_and_a_replayed_older_one_never_overwrites_it(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    headers = auth("agent", "node-a")
    now = clock()
    fresh = {"ts": now, "pools": {"chat": chat(2, 1, draining=1), "embed": chat(1)}}
    push(client, headers, {"samples": [pool_sample(10, now, pool="chat")], "report": fresh})
    # the spool replays a batch cut a minute before: its samples are stored, its report is history only
    stale = {"ts": now - 60, "pools": {"chat": chat(1)}}
    push(client, headers, {"samples": [pool_sample(1, now - 60, pool="chat")], "report": stale})
    push(client, headers, {"samples": [pool_sample(1, now - 60, pool="chat")], "report": stale})  # and again

    with engine.connect() as conn:
        latest = conn.execute(select(node_reports)).one()
        history = conn.execute(
            select(
                replica_reports.c.pool, replica_reports.c.ts, replica_reports.c.ready, replica_reports.c.starting
            ).order_by(replica_reports.c.ts, replica_reports.c.pool)
        ).all()
    assert (latest.node_id, latest.ts) == ("node-a", now)
    assert NodeReport.model_validate(latest.report) == NodeReport.model_validate(fresh)
    assert [tuple(r) for r in history] == [("chat", now - 60, 1, 0), ("chat", now, 2, 1), ("embed", now, 1, 0)]
    chat_on_a = on_nodes(engine, clock)[("node-a", "chat")]
    assert (chat_on_a.ready, chat_on_a.starting, chat_on_a.draining) == (2, 1, 1)

    newer = {"ts": now + 1, "pools": {"chat": chat(3)}}
    push(client, headers, {"samples": [pool_sample(11, now + 1, pool="chat")], "report": newer})
    assert on_nodes(engine, clock)[("node-a", "chat")].ready == 3


def test_an_old_agents_extras_give_the_pool_on_node_a_report_gives(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    """node-a sends a report; node-b, of the release before, the same figures as extras of its pool samples (the
    newest sample of the pool is the one that counts)."""
    now = clock()
    report = {"ts": now, "pools": {"chat": chat(2, 1, consecutive_crashes=3, tenants=USAGE)}}
    push(client, auth("agent", "node-a"), {"samples": [pool_sample(1, now, pool="chat")], "report": report})
    older = {**pool_sample(1, now - 1, pool="chat"), "extra": {"replicas_ready": 5}}
    newest = {
        **pool_sample(2, now, pool="chat"),
        "extra": {"replicas_ready": 2, "replicas_starting": 1, "replica_consecutive_crashes": 3, "tenants": USAGE},
    }
    answer = client.post(
        "/api/v1/ingest",
        json={"node_id": "node-b", "samples": [newest, older]},
        headers=auth("agent", "node-b"),
    )
    assert answer.status_code == 200, answer.text

    found = on_nodes(engine, clock)
    from_report, from_extras = found[("node-a", "chat")], found[("node-b", "chat")]
    assert from_extras == PoolOnNode(**{**from_report.__dict__, "node_id": "node-b"})
    assert from_extras.tenants["acme"] == TenantUsage(
        requests_per_second=3.5, tokens_per_second=420.0, latency_p99_seconds=0.8
    )
    with engine.connect() as conn:
        assert conn.scalar(select(replica_reports.c.ready).where(replica_reports.c.node_id == "node-b")) == 2


def test_a_batch_with_neither_report_nor_extras_has_no_report_and_its_pools_are_one_ready_replica(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    """An external engine probe (vLLM, TGI, Triton) or an old bench agent: one replica, as ever."""
    body = {"node_id": "node-a", "samples": [gpu_sample(1, clock()), pool_sample(2, clock(), pool="vllm")]}
    assert node_report(IngestBatch.model_validate(body)) is None
    push(client, auth("agent", "node-a"), body)
    vllm = on_nodes(engine, clock)[("node-a", "vllm")]
    assert (vllm.ready, vllm.starting, vllm.draining, dict(vllm.tenants)) == (1, 0, 0, {})
    assert vllm.metrics["request_rate_per_second"] == 10.0
    with engine.connect() as conn:
        assert conn.execute(select(node_reports)).all() == []


def test_a_pool_whose_replicas_are_all_starting_is_seen_before_any_sample_of_it(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    report = {"ts": clock(), "pools": {"chat": chat(0, 2)}}
    push(client, auth("agent", "node-a"), {"samples": [gpu_sample(1, clock())], "report": report})
    starting = on_nodes(engine, clock)[("node-a", "chat")]
    assert (starting.ready, starting.starting, starting.metrics, starting.ts) == (0, 2, {}, clock())


def test_a_series_the_report_stopped_naming_long_ago_is_a_pool_that_left_the_node(
    engine: Engine, clock: FakeClock
) -> None:
    """Series are kept however old; the report is what the node runs. A series of a pool the report does not name
    still counts as one replica while it is fresh (an external engine beside the agent's own pools)."""
    now = clock()
    with engine.begin() as conn:
        conn.execute(insert(nodes).values(id="node-a", first_seen=now - 600, last_seen=now))
        for pool, ts in (("chat", now), ("gone", now - 300), ("vllm", now - 1)):
            conn.execute(insert(series_latest).values(node_id="node-a", device=NO_DEVICE, pool=pool, ts=ts))
        store_report(
            conn, "node-a", NodeReport.model_validate({"ts": now, "pools": {"chat": chat(2)}}), received_at=now
        )
    found = on_nodes(engine, clock)
    assert sorted(found) == [("node-a", "chat"), ("node-a", "vllm")]
    assert (found[("node-a", "chat")].ready, found[("node-a", "vllm")].ready) == (2, 1)


def test_the_replica_history_sums_each_nodes_last_report_in_the_bucket(engine: Engine, clock: FakeClock) -> None:
    """Per minute: node-a's last report of the minute (3 ready, not the 1 before it) plus node-b's; a minute with no
    report is left out, and another pool's reports are not counted."""
    t0 = 1_764_424_800.0
    reports = [
        ("node-a", t0 + 5, {"chat": chat(1, 2)}),
        ("node-a", t0 + 50, {"chat": chat(3), "embed": chat(7)}),
        ("node-b", t0 + 10, {"chat": chat(2, 1)}),
        ("node-a", t0 + 130, {"chat": chat(4)}),
    ]
    with engine.begin() as conn:
        for node, ts, pools in reports:
            store_report(conn, node, NodeReport.model_validate({"ts": ts, "pools": pools}), received_at=ts)
        history = pool_replica_history(conn, "chat", t0, t0 + 180, 60.0)
    assert history == [(t0, 5, 1), (t0 + 120, 4, 0)]
