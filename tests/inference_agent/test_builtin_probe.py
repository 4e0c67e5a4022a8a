"""The builtin probe: replicas' /stats combined per pool; first read without rates, then exact deltas."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from inference_agent.probes.builtin import BuiltinEngineProbe
from inference_agent.serving.routing import Endpoint, PoolRoutes


def stats(
    instance: str,
    arrived: int,
    tokens: int,
    *,
    waiting: int = 0,
    used: int = 0,
    total: int = 100,
    fragmentation: float = 0.0,
    latencies: tuple[float, ...] = (),
) -> dict[str, Any]:
    return {
        "instance": instance,
        "engine": {
            "running": 1,
            "waiting": waiting,
            "kv_blocks_total": total,
            "kv_blocks_used": used,
            "kv_fragmentation_ratio": fragmentation,
            "generated_tokens": tokens,
            "swaps_out": 0,
            "swaps_in": 0,
        },
        "requests": {"arrived": arrived, "in_flight": 0},
        "latency": {"samples_seconds": list(latencies)},
    }


class Replicas:
    """Fake /stats by port; a port missing from ``answers`` does not answer."""

    def __init__(self) -> None:
        self.answers: dict[int, dict[str, Any]] = {}
        self.now = 100.0

    def handle(self, request: httpx.Request) -> httpx.Response:
        port = request.url.port or 0
        if port not in self.answers:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json=self.answers[port])

    def probe(self, routes: dict[str, PoolRoutes], queued: int = 0) -> BuiltinEngineProbe:
        client = httpx.Client(transport=httpx.MockTransport(self.handle))
        return BuiltinEngineProbe(lambda: routes, queued=lambda _pool: queued, client=client, clock=lambda: self.now)


TEXT = {"t": PoolRoutes("text", (Endpoint("r1", 1001), Endpoint("r2", 1002)), starting=1)}


def test_first_read_has_no_rates_and_the_second_exact_deltas() -> None:
    replicas = Replicas()
    replicas.answers = {
        1001: stats("i1", 10, 500, waiting=2, used=30, fragmentation=0.05, latencies=(0.1, 0.2)),
        1002: stats("i2", 5, 100, waiting=1, used=10, fragmentation=0.125, latencies=(0.3,)),
    }
    probe = replicas.probe(TEXT, queued=4)
    [first] = probe.read()
    assert first.pool == "t" and first.error is None
    assert first.metrics == {
        "queue_depth_requests": 7.0,  # 2 + 1 in the engines, 4 in the front end's queue
        "request_latency_p99_seconds": 0.3,
        "kv_cache_utilization_ratio": 0.2,  # 40 of 200 blocks
    }
    assert "replicas_ready" not in first.extra and "replicas_starting" not in first.extra  # the report's, now
    assert first.extra["kv_fragmentation_ratio"] == 0.125  # the worse replica

    replicas.now += 0.5
    replicas.answers = {1001: stats("i1", 30, 900), 1002: stats("i2", 15, 150)}
    [second] = probe.read()
    assert second.metrics["request_rate_per_second"] == pytest.approx(60.0)  # (20 + 10) / 0.5 s
    assert second.metrics["token_throughput_per_second"] == pytest.approx(900.0)  # (400 + 50) / 0.5 s
    assert "request_latency_p99_seconds" not in second.metrics  # nothing finished in the window: absent, not 0


def test_a_restarted_or_new_replica_gives_no_delta_yet() -> None:
    replicas = Replicas()
    replicas.answers = {1001: stats("i1", 10, 100), 1002: stats("i2", 50, 50)}
    probe = replicas.probe(TEXT)
    probe.read()
    replicas.now += 1.0
    replicas.answers = {1001: stats("i1", 14, 140), 1002: stats("i2-restarted", 3, 999)}
    [reading] = probe.read()
    assert reading.metrics["request_rate_per_second"] == pytest.approx(4.0)
    assert reading.metrics["token_throughput_per_second"] == pytest.approx(40.0)


def test_rates_are_measured_over_the_last_ten_seconds_of_reads() -> None:
    """A request every 3 s read every 0.5 s: over the window about 0.33 requests/s, never the 0 or 2 of one read."""
    replicas = Replicas()
    replicas.answers = {1001: stats("i1", 0, 0), 1002: stats("i2", 0, 0)}
    probe = replicas.probe(TEXT)
    probe.read()
    rates = []
    for tick in range(1, 61):  # 30 s
        replicas.now += 0.5
        arrived = (tick + 5) // 6  # one more at 0.5 s, 3.5 s, 6.5 s, ...
        replicas.answers = {1001: stats("i1", arrived, arrived), 1002: stats("i2", 0, 0)}
        [reading] = probe.read()
        rates.append(reading.metrics["request_rate_per_second"])
    assert all(r == pytest.approx(1 / 3, abs=0.11) for r in rates[20:])  # 3 or 4 arrivals in each 10 s
    assert rates[1] == pytest.approx(1.0)  # 1 arrival in the first 1 s: less than a window read so far


def test_a_replica_that_does_not_answer_is_an_error_on_the_reading() -> None:
    replicas = Replicas()
    replicas.answers = {1001: stats("i1", 1, 1, waiting=3)}
    [reading] = replicas.probe(TEXT).read()
    assert reading.error is not None and "r2" in reading.error
    assert reading.metrics["queue_depth_requests"] == 3.0


def test_classify_pools_have_no_kv_cache_or_tokens() -> None:
    replicas = Replicas()
    replicas.answers = {2001: stats("c1", 1, 0, total=0)}
    probe = replicas.probe({"c": PoolRoutes("classify", (Endpoint("c1", 2001),))})
    [first] = probe.read()
    replicas.now += 1.0
    replicas.answers = {2001: stats("c1", 3, 0, total=0)}
    [second] = probe.read()
    assert "kv_cache_utilization_ratio" not in first.metrics
    assert second.metrics == {"queue_depth_requests": 0.0, "request_rate_per_second": 2.0}


def test_a_pool_without_ready_replicas_has_no_metrics_and_says_how_its_replicas_crash() -> None:
    [reading] = Replicas().probe({"t": PoolRoutes("text", (), starting=2, consecutive_crashes=3)}).read()
    assert reading.metrics == {}
    assert reading.extra == {"replica_consecutive_crashes": 3}  # a crash loop, for the control plane's alerts
