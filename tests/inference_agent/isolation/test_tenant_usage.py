"""Per-tenant usage: the replica's counters and window (pure, with a clock), then the probe's tenant usage (what the
node's report carries)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from inference_agent.isolation.tenant_usage import TenantUsage
from inference_agent.probes.builtin import BuiltinEngineProbe
from inference_agent.serving.routing import Endpoint, PoolRoutes
from inference_agent.torch_runtime.api import FinishReason, TokenEvent
from tests.inference_agent.serving.conftest import StartReplica


def tenants(probe: BuiltinEngineProbe, pool: str) -> dict[str, dict[str, float]]:
    """The probe's latest usage of ``pool`` as the wire has it: each tenant's measured figures."""
    return {t: u.model_dump(exclude_none=True) for t, u in probe.tenant_usage(max_age_s=60.0).get(pool, {}).items()}


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def events(request_id: str, count: int, *, aborted: bool = False) -> Iterator[TokenEvent]:
    for i in range(count):
        yield TokenEvent(request_id, i, "a", FinishReason.LENGTH if i == count - 1 else None)
    if aborted:
        yield TokenEvent(request_id, 0, "", FinishReason.ABORT)


def test_tokens_are_counted_as_they_stream_and_an_abort_is_no_token() -> None:
    usage = TenantUsage(clock=Clock())
    usage.arrive("acme")
    stream = usage.meter("acme", "r1", 10, events("r1", 3, aborted=True))
    next(stream)
    assert usage.snapshot(None)["acme"]["generated_tokens"] == 1  # counted while the request still runs
    list(stream)
    assert usage.snapshot(None)["acme"] == {
        "arrived": 1,
        "generated_tokens": 3,
        "latency_samples_seconds": [],
        "latency_p99_seconds": None,
    }


def test_kv_blocks_are_shared_out_by_the_tokens_each_tenants_generating_requests_hold() -> None:
    usage = TenantUsage(clock=Clock())
    for tenant in ("a", "b", "c"):
        usage.arrive(tenant)
    a = usage.meter("a", "ra", 299, events("ra", 5))
    b = usage.meter("b", "rb", 99, events("rb", 5))
    usage.meter("c", "rc", 500, events("rc", 5))  # no token yet: it may still wait, and holds no blocks
    next(a), next(b)  # a holds 300 tokens, b 100
    assert {name: t["kv_blocks"] for name, t in usage.snapshot(30).items()} == {"a": 22.5, "b": 7.5, "c": 0.0}
    usage.finish("a", "ra", 0.2, ok=True)  # over: its blocks are free even before its generator is collected
    assert usage.snapshot(30)["b"]["kv_blocks"] == 30.0
    assert "kv_blocks" not in usage.snapshot(None)["b"]  # an engine without a KV cache


def test_latencies_leave_the_window_after_ten_seconds() -> None:
    clock = Clock()
    usage = TenantUsage(clock=clock)
    for i, latency in enumerate((0.1, 0.3, 0.2)):
        usage.finish("acme", f"r{i}", latency, ok=True)
    usage.finish("acme", "failed", 9.0, ok=False)
    assert usage.snapshot(None)["acme"]["latency_p99_seconds"] == 0.3
    clock.now += 10.5
    assert usage.snapshot(None)["acme"]["latency_samples_seconds"] == []


def complete(client: httpx.Client, endpoint: Endpoint, tenant: str, max_tokens: int, count: int) -> None:
    for _ in range(count):
        body = {"model": "t", "prompt": "hello", "max_tokens": max_tokens}
        answer = client.post(f"{endpoint.url}/v1/completions", json=body, headers={"X-Tenant": tenant})
        assert answer.status_code == 200, answer.text


def test_the_probe_reports_each_tenants_rates_latency_and_kv_blocks(start_replica: StartReplica) -> None:
    _, one = start_replica("t", name="r1")
    _, two = start_replica("t", name="r2")
    clock = Clock()
    probe = BuiltinEngineProbe(lambda: {"t": PoolRoutes("text", (one, two))}, clock=clock)
    with httpx.Client(timeout=10) as client:
        complete(client, one, "short", 2, 3)
        probe.read()
        first = tenants(probe, "t")
        clock.now += 0.5
        complete(client, one, "short", 2, 4)
        complete(client, two, "long", 20, 2)  # new on r2, seen at the first read: its counters started from 0
        [second] = probe.read()
    probe.close()
    assert set(first["short"]) == {"latency_p99_seconds", "kv_blocks"}  # no rates on a first read
    short, long = tenants(probe, "t")["short"], tenants(probe, "t")["long"]
    assert "tenants" not in second.extra  # control state: the report's, not the sample's
    assert short["requests_per_second"] == pytest.approx(8.0)  # 4 requests in 0.5 s
    assert short["tokens_per_second"] == pytest.approx(16.0)  # 4 × 2 tokens in 0.5 s
    assert long["requests_per_second"] == pytest.approx(4.0) and long["tokens_per_second"] == pytest.approx(80.0)
    assert 0 < short["latency_p99_seconds"] < long["latency_p99_seconds"]  # 2 tokens vs 20, each ≥ 1 ms
    assert short["kv_blocks"] == 0.0 and long["kv_blocks"] == 0.0  # measured: nothing is running now
    assert second.metrics["request_rate_per_second"] == pytest.approx(12.0)  # the pool's figures are unchanged


def test_a_classify_pool_has_requests_and_latency_but_no_tokens_or_kv_blocks(start_replica: StartReplica) -> None:
    _, replica = start_replica("c", "classify", name="c1")
    clock = Clock()
    probe = BuiltinEngineProbe(lambda: {"c": PoolRoutes("classify", (replica,))}, clock=clock)
    image = [[[0.5] * 64] * 64] * 3
    with httpx.Client(timeout=10) as client:
        probe.read()
        clock.now += 1.0
        for _ in range(2):
            answer = client.post(
                f"{replica.url}/v1/classify", json={"model": "c", "inputs": [image]}, headers={"X-Tenant": "vision"}
            )
            assert answer.status_code == 200, answer.text
        probe.read()
    probe.close()
    vision = tenants(probe, "c")["vision"]
    assert vision["requests_per_second"] == pytest.approx(2.0)
    assert set(vision) == {"requests_per_second", "latency_p99_seconds"}


def stats(instance: str, tenants: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """A text replica's /stats with the given (arrived, generated tokens) per tenant and nothing in the window."""
    return {
        "instance": instance,
        "engine": None,
        "requests": {"arrived": sum(a for a, _ in tenants.values()), "in_flight": 0},
        "latency": {"samples_seconds": []},
        "tenants": {
            name: {"arrived": a, "generated_tokens": g, "latency_samples_seconds": []}
            for name, (a, g) in tenants.items()
        },
    }


def test_a_restarted_replica_gives_no_tenant_rate_and_a_tenant_with_nothing_measured_is_left_out() -> None:
    answers = {1001: stats("i1", {"acme": (10, 100)})}
    clock = Clock()

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers[request.url.port or 0])

    client = httpx.Client(transport=httpx.MockTransport(handle))
    routes = {"t": PoolRoutes("text", (Endpoint("r1", 1001),))}
    probe = BuiltinEngineProbe(lambda: routes, client=client, clock=clock)
    probe.read()
    assert tenants(probe, "t") == {}  # no rate yet, no latency, no KV figure: nothing to say
    clock.now += 2.0
    answers[1001] = stats("i1-restarted", {"acme": (1, 1)})
    probe.read()
    assert tenants(probe, "t") == {}
    clock.now += 2.0
    answers[1001] = stats("i1-restarted", {"acme": (5, 41), "_other": (3, 3), "bad name": (9, 9)})
    probe.read()
    assert tenants(probe, "t") == {"acme": {"requests_per_second": 2.0, "tokens_per_second": 20.0}}  # only wire names
    clock.now += 61.0
    assert probe.tenant_usage(max_age_s=60.0) == {}  # a probe that stopped reading says nothing of now


def test_made_up_tenant_names_past_the_cap_share_one_record() -> None:
    from inference_agent.isolation.tenant_usage import MAX_TENANTS, OTHER_TENANTS, TenantUsage

    usage = TenantUsage(clock=lambda: 0.0)
    for i in range(MAX_TENANTS + 50):
        usage.arrive(f"tenant-{i}")
    snapshot = usage.snapshot(None)
    assert len(snapshot) == MAX_TENANTS + 1
    assert snapshot[OTHER_TENANTS]["arrived"] == 50
