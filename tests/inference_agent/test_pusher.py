"""The pusher: in order, acknowledged only on 200, backing off through outages, rejected batches set aside; each
body with the node's report as of its sending, each answer's desired state parsed once."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.agent_token import AgentToken
from inference_agent.fake_collector import FakeCollector, ScriptedAnswer, ScriptedCollector
from inference_agent.pusher import (
    MalformedDesired,
    Pusher,
    PushOutcome,
    UnexpectedAnswer,
    backoff_delay,
    parse_ack,
    pusher_problem,
    retry_after_s,
)
from inference_agent.rejected_batches import RejectedBatches
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry
from wire import columnar
from wire.control import (
    DesiredState,
    NodeReport,
    PoolDesired,
    PoolReport,
    QuotaDesired,
    TenantDesired,
    TenantUsage,
)
from wire.samples import UnsequencedSampleJson


def sample(ts: float) -> UnsequencedSampleJson:
    return {"ts": ts, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.4}, "extra": {}}


def make_pusher(tmp_path: Path, collector: FakeCollector, **kwargs: Any) -> tuple[Pusher, Spool]:
    client = httpx.Client(base_url="http://collector", transport=collector.transport)
    return pusher_on(tmp_path, client, **kwargs)


def pusher_on(tmp_path: Path, client: httpx.Client, **kwargs: Any) -> tuple[Pusher, Spool]:
    spool = Spool(tmp_path / "spool")
    pusher = Pusher(
        spool,
        client,
        AgentTelemetry(CollectorRegistry()),
        node_id="node-a",
        token=AgentToken("agent-token"),
        inventory={"hostname": "h", "gpus": []},
        rejected=RejectedBatches(tmp_path / "rejected", max_bytes=1 << 20, max_files=100),
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


def test_the_compact_encoding_is_sent_once_offered_and_carries_the_same_batch(tmp_path: Path) -> None:
    collector = FakeCollector(offers_compact=True)
    pusher, spool = make_pusher(tmp_path, collector, max_batch=2, report=lambda ts: NodeReport(ts=ts, pools={}))
    spool.append([sample(1000 + i) for i in range(4)] + [{**sample(1004), "device": None, "pool": "p"}])
    for _ in range(3):
        assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert collector.content_types == ["application/json", columnar.MEDIA_TYPE, columnar.MEDIA_TYPE]
    assert [[s["seq"] for s in r["samples"]] for r in collector.requests] == [[1, 2], [3, 4], [5]]
    compact = collector.requests[1]["samples"][0]
    assert (compact["ts"], compact["device"], compact["metrics"]) == (1002, 0, {"gpu_utilization_ratio": 0.4})
    assert collector.requests[2]["samples"][0]["pool"] == "p" and "report" in collector.requests[2]
    assert spool.pending == 0


def test_a_compact_batch_an_older_collector_refuses_goes_again_as_json_and_nothing_is_set_aside(
    tmp_path: Path,
) -> None:
    """A new collector offered it; the next push reached an older one behind the same address, which reads the body
    as JSON and answers 422: the batch is sent again as JSON, not set aside as bad."""
    collector = FakeCollector(offers_compact=True)
    pusher, spool = make_pusher(tmp_path, collector, max_batch=1)
    spool.append([sample(1000), sample(1001)])
    assert pusher.push_once().outcome is PushOutcome.PUSHED
    collector.offers_compact = False
    assert pusher.push_once().outcome is PushOutcome.FAILED
    assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert collector.content_types == ["application/json", "application/json"]
    assert sorted(collector.accepted) == [1, 2] and spool.pending == 0
    assert not list((tmp_path / "rejected").glob("*"))


def test_a_batch_the_compact_encoding_cannot_hold_goes_as_json(tmp_path: Path) -> None:
    collector = FakeCollector(offers_compact=True)
    pusher, spool = make_pusher(tmp_path, collector, max_batch=1)
    spool.append([sample(1000), {**sample(1001), "metrics": {"my_own_metric": 1.0}}])
    pusher.push_once()
    pusher.push_once()
    assert collector.content_types == ["application/json", "application/json"]


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


def test_desired_state_is_handed_over_typed(tmp_path: Path) -> None:
    got: list[DesiredState | MalformedDesired] = []
    collector = FakeCollector(desired={"pools": {"llama-8b": {"replicas": 2}}})
    pusher, spool = make_pusher(tmp_path, collector, on_desired=got.append)
    spool.append([sample(1000)])
    pusher.push_once()
    assert got == [DesiredState(pools={"llama-8b": PoolDesired(replicas=2)})]


def test_a_malformed_desired_state_is_handed_over_as_what_is_wrong_and_the_samples_are_delivered(
    tmp_path: Path,
) -> None:
    got: list[DesiredState | MalformedDesired] = []
    collector = FakeCollector(desired={"pools": {"chat": {"replicas": -1}}, "tenants": {"a": {"slo_class": "gold"}}})
    pusher, spool = make_pusher(tmp_path, collector, on_desired=got.append)
    spool.append([sample(1000)])
    assert pusher.push_once().outcome is PushOutcome.PUSHED and spool.pending == 0
    [malformed] = got
    assert isinstance(malformed, MalformedDesired)
    assert malformed.detail.startswith("pools.chat.replicas: Input should be greater than or equal to 0; ")
    assert "tenants.a.slo_class: Input should be 'latency_critical', 'standard' or 'batch'" in malformed.detail


class Node:
    """The node as its report would say: ``ready`` replicas of chat, now ``now`` by the wall clock."""

    def __init__(self, ready: int, now: float) -> None:
        self.ready, self.now = ready, now

    def report(self, ts: float) -> NodeReport:
        return NodeReport(ts=ts, pools={"chat": PoolReport(ready=self.ready)})


def test_each_body_carries_the_nodes_report_as_it_is_sent(tmp_path: Path) -> None:
    collector = FakeCollector()
    usage = {"acme": TenantUsage(requests_per_second=3.5, latency_p99_seconds=0.8)}
    report = NodeReport(
        ts=1.0,  # replaced: the pusher asks for the report with the time it sends it
        pools={
            "chat": PoolReport(
                ready=2, starting=1, draining=1, consecutive_crashes=4, startup_seconds=41.2, tenants=usage
            )
        },
    )
    pusher, spool = make_pusher(
        tmp_path, collector, report=lambda ts: report.model_copy(update={"ts": ts}), wall_clock=lambda: 2000.5
    )
    spool.append([sample(1000)])
    pusher.push_once()
    assert collector.requests[0]["report"] == {
        "ts": 2000.5,
        "pools": {
            "chat": {
                "ready": 2,
                "starting": 1,
                "draining": 1,
                "consecutive_crashes": 4,
                "startup_seconds": 41.2,
                "tenants": {"acme": {"requests_per_second": 3.5, "latency_p99_seconds": 0.8}},
            }
        },
    }


def test_a_spool_replayed_after_an_outage_carries_the_report_of_now_not_of_its_samples(tmp_path: Path) -> None:
    collector = FakeCollector(down=True)
    node = Node(ready=1, now=1000.0)
    pusher, spool = make_pusher(tmp_path, collector, max_batch=2, report=node.report, wall_clock=lambda: node.now)
    spool.append([sample(1000 + i) for i in range(4)])  # spooled while the node had 1 ready
    assert pusher.push_once().outcome is PushOutcome.FAILED
    node.ready, node.now = 3, 4600.0  # an hour later, 3 ready
    collector.down = False
    pusher.push_once()
    node.now = 4601.0
    pusher.push_once()
    reports = [(r["report"]["ts"], r["report"]["pools"]["chat"]["ready"]) for r in collector.requests]
    assert reports == [(4600.0, 3), (4601.0, 3)]  # each taken as its body was sent
    assert [s["ts"] for r in collector.requests for s in r["samples"]] == [1000, 1001, 1002, 1003]


def test_a_report_that_cannot_be_built_leaves_it_out_and_the_samples_still_go(tmp_path: Path) -> None:
    def broken(ts: float) -> NodeReport:
        raise RuntimeError("bug")

    collector = FakeCollector()
    pusher, spool = make_pusher(tmp_path, collector, report=broken)
    spool.append([sample(1000)])
    assert pusher.push_once().outcome is PushOutcome.PUSHED
    assert "report" not in collector.requests[0]


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


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        *[(None, None), ("7", 7.0), ("0", 0.0), ("60", 60.0), ("61", 60.0), ("1e9", 60.0), ("inf", 60.0)],
        *[("nan", 60.0), ("-3", 60.0), ("soon", 60.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 60.0)],
    ],
)
def test_retry_after_is_believed_up_to_the_cap(value: str | None, seconds: float | None) -> None:
    assert retry_after_s(value, cap_s=60.0) == seconds


@pytest.mark.parametrize(
    "body",
    [b"<html>bad gateway</html>", b"[]", b"null", b'{"accepted": "many"}', b'{"accepted": -1}', b'{"desired": [1]}'],
)
def test_an_answer_that_is_no_ingest_answer_is_unexpected(body: bytes) -> None:
    with pytest.raises(UnexpectedAnswer):
        parse_ack(body)


def test_an_ingest_answer_is_read() -> None:
    ack = parse_ack(b'{"accepted": 2, "duplicates": 1, "desired": null}')
    assert (ack.accepted, ack.duplicates, ack.desired) == (2, 1, DesiredState())  # nothing desired


def test_a_newer_servers_fields_are_ignored() -> None:
    answer = {
        "accepted": 1,
        "duplicates": 0,
        "served_by": "collector-2",
        "desired": {
            "generation": 7,
            "tenants": {"acme": {"quotas": {"chat": {"rate_rps": 5.0, "gpu_seconds_per_hour": 30}}}},
        },
    }
    ack = parse_ack(json.dumps(answer).encode())
    assert ack.desired == DesiredState(tenants={"acme": TenantDesired(quotas={"chat": QuotaDesired(rate_rps=5.0)})})


@pytest.mark.parametrize(
    ("ran", "running", "since_progress_s", "healthy"),
    [(False, False, 0.0, True), (True, True, 299.0, True), (True, True, 301.0, False), (True, False, 0.0, False)],
)
def test_the_pusher_is_unhealthy_when_stopped_or_stale(
    ran: bool, running: bool, since_progress_s: float, healthy: bool
) -> None:
    problem = pusher_problem(ran=ran, running=running, since_progress_s=since_progress_s, stale_after_s=300.0)
    assert (problem is None) is healthy


@pytest.fixture
def scripted() -> Iterator[ScriptedCollector]:
    collector = ScriptedCollector(ScriptedAnswer())
    yield collector
    collector.close()


def scripted_pusher(tmp_path: Path, collector: ScriptedCollector, **kwargs: Any) -> tuple[Pusher, Spool]:
    return pusher_on(tmp_path, httpx.Client(base_url=collector.url, timeout=5.0), **kwargs)


@pytest.mark.parametrize(
    ("answer", "retry_after"),
    [
        (ScriptedAnswer(200, b"<html>ok</html>"), None),
        (ScriptedAnswer(200, b"[]"), None),
        (ScriptedAnswer(503, b"{}", (("Retry-After", "inf"),)), 60.0),
        (ScriptedAnswer(503, b"{}", (("Retry-After", "1e9"),)), 60.0),
        (ScriptedAnswer(429, b"{}", (("Retry-After", "nan"),)), 60.0),
    ],
)
def test_a_bad_answer_on_the_wire_keeps_the_samples_and_bounds_the_wait(
    tmp_path: Path, scripted: ScriptedCollector, answer: ScriptedAnswer, retry_after: float | None
) -> None:
    scripted.answer = answer
    pusher, spool = scripted_pusher(tmp_path, scripted)
    spool.append([sample(1000), sample(1000.5)])
    result = pusher.push_once()
    assert result.outcome is PushOutcome.FAILED
    assert result.retry_after_s == retry_after
    assert spool.pending == 2


def test_the_run_outlives_bad_answers_and_delivers_once_they_stop(tmp_path: Path, scripted: ScriptedCollector) -> None:
    scripted.answer = ScriptedAnswer(200, b"[]")
    pusher, spool = scripted_pusher(tmp_path, scripted)
    spool.append([sample(1000)])
    stop = threading.Event()
    thread = threading.Thread(target=pusher.run, args=(stop,), kwargs={"interval_s": 0.01, "seed": 1})
    thread.start()
    try:
        wait_for(lambda: scripted.pushes >= 3)
        assert thread.is_alive()
        assert pusher.problem() is None
        assert spool.pending == 1
        scripted.answer = ScriptedAnswer(200, b'{"accepted": 1, "duplicates": 0}')
        wait_for(lambda: spool.pending == 0)
    finally:
        stop.set()
        thread.join(10)
    assert pusher.problem() is not None  # its loop has ended: /healthz would say so


def test_a_huge_retry_after_waits_only_the_cap(tmp_path: Path, scripted: ScriptedCollector) -> None:
    scripted.answer = ScriptedAnswer(503, b"{}", (("Retry-After", "1e9"),))
    pusher, spool = scripted_pusher(tmp_path, scripted, max_retry_after_s=0.05)
    spool.append([sample(1000)])
    stop = threading.Event()
    thread = threading.Thread(target=pusher.run, args=(stop,), kwargs={"interval_s": 0.01, "seed": 1})
    thread.start()
    try:
        wait_for(lambda: scripted.pushes >= 3, timeout_s=5.0)  # at 1e9 s believed, the second would never come
    finally:
        stop.set()
        thread.join(10)


def test_no_progress_for_five_retry_afters_is_a_problem(tmp_path: Path) -> None:
    now = [0.0]
    collector = FakeCollector(down=True)
    pusher, spool = make_pusher(tmp_path, collector, max_retry_after_s=60.0, clock=lambda: now[0])
    spool.append([sample(1000)])
    now[0] = 301.0
    pusher.push_once()
    assert pusher.problem() == "no push got through for 301 s (more than 300 s)"
    collector.down = False
    pusher.push_once()
    assert pusher.problem() is None


def wait_for(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
