"""The pusher: in order, acknowledged only on 200, backing off through outages, rejected batches set aside."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.fake_collector import FakeCollector
from inference_agent.pusher import Pusher, PushOutcome, backoff_delay
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry


def sample(ts: float) -> dict[str, Any]:
    return {"ts": ts, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.4}, "extra": {}}


def make_pusher(tmp_path: Path, collector: FakeCollector, **kwargs: Any) -> tuple[Pusher, Spool]:
    spool = Spool(tmp_path / "spool")
    client = httpx.Client(base_url="http://collector", transport=collector.transport)
    pusher = Pusher(
        spool,
        client,
        AgentTelemetry(CollectorRegistry()),
        node_id="node-a",
        token=collector.token,
        inventory={"hostname": "h", "gpus": []},
        rejected_dir=tmp_path / "rejected",
        **kwargs,
    )
    return pusher, spool


@pytest.mark.parametrize(("failures", "ceiling"), [(1, 0.5), (2, 1.0), (4, 4.0), (7, 30.0), (50, 30.0)])
def test_backoff_is_full_jitter_under_an_exponential_ceiling(failures: int, ceiling: float) -> None:
    rng = random.Random(1)
    delays = [backoff_delay(failures, rng=rng) for _ in range(500)]
    assert 0 <= min(delays) < ceiling * 0.1
    assert ceiling * 0.9 < max(delays) <= ceiling


def test_push_sends_in_order_and_inventory_only_until_registered(tmp_path: Path) -> None:
    collector = FakeCollector()
    pusher, spool = make_pusher(tmp_path, collector, max_batch=3)
    spool.append([sample(1000 + i) for i in range(5)])
    assert pusher.network_latency() is None
    assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert pusher.push_once().outcome is PushOutcome.NOTHING
    assert [[s["seq"] for s in r["samples"]] for r in collector.requests] == [[1, 2, 3], [4, 5]]
    assert "inventory" in collector.requests[0]
    assert "inventory" not in collector.requests[1]
    assert spool.pending == 0
    latency = pusher.network_latency()
    assert latency is not None
    assert latency > 0


@pytest.mark.parametrize(("status", "retry_after"), [(503, "7"), (500, None), (401, None), (403, None)])
def test_failed_push_keeps_the_samples(tmp_path: Path, status: int, retry_after: str | None) -> None:
    collector = FakeCollector(status=status, retry_after=retry_after)
    pusher, spool = make_pusher(tmp_path, collector)
    spool.append([sample(1000), sample(1000.5)])
    result = pusher.push_once()
    assert result.outcome is PushOutcome.FAILED
    assert result.retry_after_s == (float(retry_after) if retry_after else None)
    assert spool.pending == 2


def test_collector_away_keeps_the_samples(tmp_path: Path) -> None:
    collector = FakeCollector(down=True)
    pusher, spool = make_pusher(tmp_path, collector)
    spool.append([sample(1000)])
    assert pusher.push_once().outcome is PushOutcome.FAILED
    assert spool.pending == 1
    collector.down = False
    assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert list(collector.accepted) == [1]


def test_an_invalid_batch_is_set_aside_and_the_pusher_goes_on(tmp_path: Path) -> None:
    collector = FakeCollector(status=422)
    pusher, spool = make_pusher(tmp_path, collector)
    spool.append([sample(1000), sample(1000.5)])
    assert pusher.push_once().outcome is PushOutcome.REJECTED
    assert spool.pending == 0
    kept = list((tmp_path / "rejected").glob("seq-1-2.json"))
    assert len(kept) == 1
    assert "fake failure" in kept[0].read_text()


def test_too_large_halves_the_batch(tmp_path: Path) -> None:
    collector = FakeCollector(status=413)
    pusher, spool = make_pusher(tmp_path, collector, max_batch=8)
    spool.append([sample(1000 + i) for i in range(8)])
    assert pusher.push_once().outcome is PushOutcome.FAILED
    collector.status = 200
    assert pusher.push_once().samples == 4


def test_desired_state_is_handed_over(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    collector = FakeCollector(desired={"pools": {"llama-8b": {"replicas": 2}}})
    pusher, spool = make_pusher(tmp_path, collector, on_desired=got.append)
    spool.append([sample(1000)])
    pusher.push_once()
    assert got == [{"pools": {"llama-8b": {"replicas": 2}}}]


def test_run_delivers_everything_exactly_once_through_an_outage(tmp_path: Path) -> None:
    collector = FakeCollector(down=True)
    pusher, spool = make_pusher(tmp_path, collector, max_batch=50)
    stop = threading.Event()
    thread = threading.Thread(target=pusher.run, args=(stop,), kwargs={"interval_s": 0.01, "seed": 3})
    thread.start()
    try:
        for i in range(300):
            spool.append([sample(1000 + i * 0.5)])
            if i == 100:
                collector.down = False
        deadline = threading.Event()
        for _ in range(500):
            if len(collector.accepted) == 300:
                break
            deadline.wait(0.02)
    finally:
        stop.set()
        thread.join(10)
    assert sorted(collector.accepted) == list(range(1, 301))
    assert spool.pending == 0
