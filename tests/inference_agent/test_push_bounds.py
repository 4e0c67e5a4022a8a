"""Issue 35 #12, the agent's side: a push whose samples the collector refused one by one (pools past the node's
bound) is delivered, its spool moves on and nothing goes to ``rejected/``; and ``rejected/`` itself is bounded in
bytes and files, oldest dropped first, counted in the agent's metrics (it grew ~2.6 GB a day)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from inference_agent.agent_token import AgentToken
from inference_agent.fake_collector import FakeCollector
from inference_agent.pusher import Pusher, PushOutcome
from inference_agent.rejected_batches import RejectedBatches
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry
from tests.support.clock import FakeClock
from web.app import create_app
from web.services import AppServices
from wire.samples import UnsequencedSampleJson


def pool_reading(ts: float, pool: str) -> UnsequencedSampleJson:
    return {"ts": ts, "device": None, "pool": pool, "metrics": {"request_rate_per_second": 3.0}, "extra": {}}


def gpu_reading(ts: float) -> UnsequencedSampleJson:
    return {"ts": ts, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.4}, "extra": {}}


def make_pusher(
    tmp_path: Path, client: httpx.Client, token: str, rejected: RejectedBatches | None = None
) -> tuple[Pusher, Spool, AgentTelemetry]:
    spool, telemetry = Spool(tmp_path / "spool"), AgentTelemetry(CollectorRegistry())
    rejected = rejected or RejectedBatches(tmp_path / "rejected", max_bytes=1 << 20, max_files=100)
    pusher = Pusher(
        spool, client, telemetry, node_id="node-a", token=AgentToken(token), inventory=None, rejected=rejected
    )
    return pusher, spool, telemetry


def pushed(telemetry: AgentTelemetry, outcome: str) -> float | None:
    return telemetry.registry.get_sample_value("fleetpilot_agent_pushed_samples_total", {"outcome": outcome})


def test_samples_of_pools_past_the_bound_are_refused_alone_and_the_spool_moves_on(
    tmp_path: Path, services: AppServices, token: Callable[..., str], clock: FakeClock
) -> None:
    services.settings.ingest_max_pools_per_node = 2
    with TestClient(create_app(services)) as client:  # the real ingest route, as the agent's HTTP client
        pusher, spool, telemetry = make_pusher(tmp_path, client, token("agent", node_id="node-a"))
        for _ in range(2):
            spool.append([gpu_reading(clock())] + [pool_reading(clock(), p) for p in ("a", "b", "c", "d")])
            assert pusher.push_once().outcome is PushOutcome.PUSHED
            clock.advance(1)
    assert spool.pending == 0  # delivered: nothing is sent again
    assert not (tmp_path / "rejected").exists() or not any((tmp_path / "rejected").iterdir())
    assert (pushed(telemetry, "accepted"), pushed(telemetry, "refused")) == (6, 4)
    assert pushed(telemetry, "rejected") == 0


def test_the_rejected_directory_keeps_the_newest_batches_within_its_bounds_and_counts_what_it_dropped(
    tmp_path: Path,
) -> None:
    collector = FakeCollector(status=422)
    client = httpx.Client(base_url="http://collector", transport=collector.transport)
    rejected = RejectedBatches(tmp_path / "rejected", max_bytes=1_000_000, max_files=3)
    pusher, spool, telemetry = make_pusher(tmp_path, client, "agent-token", rejected)
    for batch in range(6):
        spool.append([gpu_reading(1000.0 + batch)])
        assert pusher.push_once().outcome is PushOutcome.REJECTED
    kept = sorted(p.name for p in (tmp_path / "rejected").iterdir())
    assert kept == ["seq-4-4.json", "seq-5-5.json", "seq-6-6.json"]  # the oldest three dropped
    assert spool.pending == 0
    assert telemetry.registry.get_sample_value("fleetpilot_agent_rejected_batches_dropped_total") == 3
    assert telemetry.registry.get_sample_value("fleetpilot_agent_rejected_batches_files") == 3


def test_the_rejected_directory_is_bounded_in_bytes_and_a_batch_past_the_bound_keeps_only_why(
    tmp_path: Path,
) -> None:
    collector = FakeCollector(status=422)
    client = httpx.Client(base_url="http://collector", transport=collector.transport)
    rejected = RejectedBatches(tmp_path / "rejected", max_bytes=20_000, max_files=1000)
    pusher, spool, telemetry = make_pusher(tmp_path, client, "agent-token", rejected)
    for batch in range(40):
        spool.append([gpu_reading(1000.0 + batch + i / 100) for i in range(10)])  # ~1.2 KB a batch
        pusher.push_once()
    spool.append([gpu_reading(2000.0 + i / 1000) for i in range(1000)])  # ~120 KB: alone past the bound
    pusher.push_once()
    files = list((tmp_path / "rejected").iterdir())
    assert sum(p.stat().st_size for p in files) <= 20_000
    newest = json.loads((tmp_path / "rejected" / "seq-401-1400.json").read_text())
    assert newest["samples"] == [] and newest["samples_left_out"] == 1000 and newest["status"] == 422
    bytes_held = telemetry.registry.get_sample_value("fleetpilot_agent_rejected_batches_bytes")
    assert bytes_held == sum(p.stat().st_size for p in files)


def test_what_an_earlier_run_set_aside_counts_toward_the_bound(tmp_path: Path) -> None:
    folder = tmp_path / "rejected"
    folder.mkdir()
    for first in (1, 11, 21):
        (folder / f"seq-{first}-{first + 9}.json").write_text("{}")
    (folder / "notes.txt").write_text("an operator's file is not ours to drop")
    RejectedBatches(folder, max_bytes=1000, max_files=2)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "seq-11-20.json", "seq-21-30.json"]


def test_the_same_refusal_push_after_push_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    refusal = {
        "reason": "too_many_pools",
        "samples": 1,
        "detail": "ingest_max_pools_per_node (64): p65",
        "pools": ["p65"],
    }
    answer = {"accepted": 1, "duplicates": 0, "refused": [refusal], "desired": None}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    pusher, spool, telemetry = make_pusher(tmp_path, httpx.Client(base_url="http://c", transport=transport), "t")
    with caplog.at_level(logging.WARNING, logger="inference_agent.pusher"):
        for second in range(3):
            spool.append([gpu_reading(1000.0 + second), pool_reading(1000.0 + second, "p65")])
            assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert [r.getMessage() for r in caplog.records] == [
        "collector refused 1 samples (too_many_pools): ingest_max_pools_per_node (64): p65"
    ]
    assert pushed(telemetry, "refused") == 3 and spool.pending == 0
