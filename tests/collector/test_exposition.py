"""``GET /metrics`` in-process: load metrics as ``fleetpilot_<metric>`` per series, liveness, the collector's own
metrics, and the whole text through ``promtool check metrics``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from collector.exposition import SERIES_LABELS, exposition_name
from tests.conftest import gpu_sample, pool_sample
from tests.support.clock import FakeClock
from tests.support.prometheus import promtool_check_metrics, require_program
from web.services import AppServices
from wire.catalog import METRICS, Metric, Scope

Labels = tuple[tuple[str, str], ...]
AuthHeaders = Callable[..., dict[str, str]]


def labels(**values: str) -> Labels:
    return tuple(sorted(values.items()))


@dataclass
class Scrape:
    """One parsed ``/metrics`` answer: family types and every sample's value by sample name and labels."""

    text: str
    types: dict[str, str] = field(default_factory=dict)
    samples: dict[str, dict[Labels, float]] = field(default_factory=lambda: defaultdict(dict))

    def value(self, name: str, **label_values: str) -> float | None:
        return self.samples.get(name, {}).get(labels(**label_values))

    def series(self, name: str) -> dict[Labels, float]:
        return dict(self.samples.get(name, {}))


def scrape(client: TestClient) -> Scrape:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    parsed = Scrape(response.text)
    for family in text_string_to_metric_families(response.text):
        parsed.types[family.name] = family.type
        for sample in family.samples:
            parsed.samples[sample.name][labels(**sample.labels)] = sample.value
    return parsed


def ingest(client: TestClient, headers: dict[str, str], node_id: str, samples: list[dict[str, Any]]) -> Any:
    response = client.post("/api/v1/ingest", json={"node_id": node_id, "samples": samples}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def node_sample(seq: int, ts: float, **metrics: float) -> dict[str, Any]:
    return {"seq": seq, "ts": ts, "device": None, "pool": None, "metrics": metrics, "extra": {}}


# One valid value per metric, distinct from each other and from the sample builders' defaults.
VALID_VALUES: dict[str, float] = {
    "gpu_utilization_ratio": 0.83,
    "gpu_memory_used_bytes": 61_203_283_968.0,
    "gpu_memory_bandwidth_utilization_ratio": 0.41,
    "gpu_power_watts": 312.5,
    "gpu_temperature_celsius": 67.0,
    "network_throughput_bytes_per_second": 1.25e8,
    "network_latency_seconds": 0.0042,
    "request_rate_per_second": 41.5,
    "queue_depth_requests": 3.0,
    "token_throughput_per_second": 1873.25,
    "request_latency_p99_seconds": 0.815,
    "kv_cache_utilization_ratio": 0.66,
}


def every_metric_once(seq: int, ts: float, *, device: int = 0, pool: str = "llama-8b") -> list[dict[str, Any]]:
    """One sample per scope carrying all of that scope's metrics, with the values of ``VALID_VALUES``."""

    def of(scope: Scope) -> dict[str, float]:
        return {m.name: VALID_VALUES[m.name] for m in METRICS if m.scope is scope}

    return [
        {"seq": seq, "ts": ts, "device": device, "pool": None, "metrics": of(Scope.GPU)},
        {"seq": seq + 1, "ts": ts, "device": None, "pool": None, "metrics": of(Scope.NODE)},
        {"seq": seq + 2, "ts": ts, "device": None, "pool": pool, "metrics": of(Scope.POOL_REPLICA)},
    ]


def expected_labels(metric: Metric, node: str, *, device: int = 0, pool: str = "llama-8b") -> Labels:
    if metric.scope is Scope.GPU:
        return labels(node=node, gpu=str(device), pool="")
    if metric.scope is Scope.NODE:
        return labels(node=node, gpu="", pool="")
    return labels(node=node, gpu="", pool=pool)


def test_ingested_values_appear_per_series_with_node_gpu_pool_labels(
    client: TestClient, auth: AuthHeaders, clock: FakeClock
) -> None:
    headers = auth("agent", node_id="node-a")
    ingest(
        client,
        headers,
        "node-a",
        [
            gpu_sample(1, clock(), device=0, gpu_utilization_ratio=0.83, gpu_memory_used_bytes=61_203_283_968),
            gpu_sample(2, clock(), device=1, gpu_utilization_ratio=0.25, gpu_memory_used_bytes=2e9),
            pool_sample(3, clock(), pool="llama-8b", request_rate_per_second=41.5, queue_depth_requests=3),
            node_sample(4, clock(), network_latency_seconds=0.0042),
        ],
    )

    metrics = scrape(client)

    assert metrics.series("fleetpilot_gpu_utilization_ratio") == {
        labels(node="node-a", gpu="0", pool=""): 0.83,
        labels(node="node-a", gpu="1", pool=""): 0.25,
    }
    assert metrics.series("fleetpilot_gpu_memory_used_bytes") == {
        labels(node="node-a", gpu="0", pool=""): 61_203_283_968.0,
        labels(node="node-a", gpu="1", pool=""): 2e9,
    }
    assert metrics.series("fleetpilot_request_rate_per_second") == {
        labels(node="node-a", gpu="", pool="llama-8b"): 41.5
    }
    assert metrics.series("fleetpilot_queue_depth_requests") == {labels(node="node-a", gpu="", pool="llama-8b"): 3.0}
    assert metrics.series("fleetpilot_network_latency_seconds") == {labels(node="node-a", gpu="", pool=""): 0.0042}
    assert metrics.series("fleetpilot_node_up") == {labels(node="node-a"): 1.0}


def test_metrics_never_ingested_have_no_samples_rather_than_zero(
    client: TestClient, auth: AuthHeaders, clock: FakeClock
) -> None:
    ingest(client, auth("agent", node_id="node-a"), "node-a", [gpu_sample(1, clock(), gpu_utilization_ratio=0.0)])

    metrics = scrape(client)

    # A measured zero is a sample; an unmeasured metric (say, no power reading on this node) is no sample at all.
    assert metrics.series("fleetpilot_gpu_utilization_ratio") == {labels(node="node-a", gpu="0", pool=""): 0.0}
    ingested = {"gpu_utilization_ratio", "gpu_memory_used_bytes"}
    for m in METRICS:
        if m.name not in ingested:
            assert metrics.series(exposition_name(m.name)) == {}, m.name
            # The family is still declared, so dashboards and promtool see its type and help.
            assert metrics.types[exposition_name(m.name)] == "gauge"


def test_an_empty_fleet_exposes_no_load_samples(client: TestClient) -> None:
    metrics = scrape(client)

    for m in METRICS:
        assert metrics.series(exposition_name(m.name)) == {}
    assert metrics.series("fleetpilot_node_up") == {}


def test_the_latest_sample_wins_and_a_replayed_older_one_does_not(
    client: TestClient, auth: AuthHeaders, clock: FakeClock
) -> None:
    headers = auth("agent", node_id="node-a")
    ingest(client, headers, "node-a", [gpu_sample(1, clock(), gpu_utilization_ratio=0.3)])
    clock.advance(0.5)
    ingest(client, headers, "node-a", [gpu_sample(3, clock(), gpu_utilization_ratio=0.9)])
    # A spooled sample replayed late: older ts, so it is history, not the current value.
    ingest(client, headers, "node-a", [gpu_sample(2, clock() - 0.25, gpu_utilization_ratio=0.6)])

    assert scrape(client).value("fleetpilot_gpu_utilization_ratio", node="node-a", gpu="0", pool="") == 0.9


@pytest.mark.parametrize(
    ("silence_s", "up"),
    [(2.9, 1.0), (3.0, 0.0), (60.0, 0.0)],
    ids=["under-3s-up", "at-3s-down", "long-gone-down"],
)
def test_a_node_silent_for_the_liveness_window_is_down_and_its_series_leave(
    client: TestClient, auth: AuthHeaders, clock: FakeClock, silence_s: float, up: float
) -> None:
    ingest(client, auth("agent", node_id="node-a"), "node-a", [gpu_sample(1, clock(), gpu_utilization_ratio=0.83)])
    clock.advance(silence_s)
    ingest(client, auth("agent", node_id="node-b"), "node-b", [gpu_sample(1, clock(), gpu_utilization_ratio=0.2)])

    metrics = scrape(client)

    assert metrics.series("fleetpilot_node_up") == {labels(node="node-a"): up, labels(node="node-b"): 1.0}
    expected = {labels(node="node-b", gpu="0", pool=""): 0.2}
    if up:
        expected[labels(node="node-a", gpu="0", pool="")] = 0.83
    assert metrics.series("fleetpilot_gpu_utilization_ratio") == expected
    # Every load series of a down node is gone, not only the one checked above.
    for m in METRICS:
        assert all(dict(key)["node"] != "node-a" or up for key in metrics.series(exposition_name(m.name))), m.name


def test_a_node_that_comes_back_is_up_with_its_new_values(
    client: TestClient, auth: AuthHeaders, clock: FakeClock, services: AppServices
) -> None:
    headers = auth("agent", node_id="node-a")
    ingest(client, headers, "node-a", [gpu_sample(1, clock(), gpu_utilization_ratio=0.83)])
    clock.advance(services.fleet.node_down_after_seconds + 1)
    assert scrape(client).value("fleetpilot_node_up", node="node-a") == 0.0

    ingest(client, headers, "node-a", [gpu_sample(2, clock(), gpu_utilization_ratio=0.1)])

    metrics = scrape(client)
    assert metrics.value("fleetpilot_node_up", node="node-a") == 1.0
    assert metrics.series("fleetpilot_gpu_utilization_ratio") == {labels(node="node-a", gpu="0", pool=""): 0.1}


def test_exposition_names_derive_from_the_catalog_for_all_12_metrics(
    client: TestClient, auth: AuthHeaders, clock: FakeClock
) -> None:
    assert len(METRICS) == 12
    ingest(client, auth("agent", node_id="node-a"), "node-a", every_metric_once(1, clock()))

    metrics = scrape(client)

    for m in METRICS:
        name = exposition_name(m.name)
        assert name == f"fleetpilot_{m.name}"
        assert metrics.types[name] == "gauge", name
        assert metrics.series(name) == {expected_labels(m, "node-a"): VALID_VALUES[m.name]}, name
    # No load family exists outside the catalog: the series-labelled families are exactly the catalog's names.
    series_labelled = {
        name
        for name, series in metrics.samples.items()
        if any({k for k, _ in key} == set(SERIES_LABELS) for key in series)
    }
    assert series_labelled == {exposition_name(m.name) for m in METRICS}


def test_the_collectors_own_metrics_move_with_each_outcome(
    client: TestClient, auth: AuthHeaders, clock: FakeClock
) -> None:
    headers = auth("agent", node_id="node-a")
    before = scrape(client)
    assert before.value("fleetpilot_collector_ingested_samples_total", outcome="accepted") == 0.0
    assert before.value("fleetpilot_collector_ingested_samples_total", outcome="duplicate") == 0.0
    assert before.value("fleetpilot_collector_rejected_requests_total", reason="invalid") == 0.0
    assert before.value("fleetpilot_collector_rejected_requests_total", reason="unauthorized") == 0.0
    assert before.value("fleetpilot_collector_ingest_duration_seconds_count") == 0.0

    batch = [gpu_sample(1, clock()), pool_sample(2, clock())]
    assert ingest(client, headers, "node-a", batch)["accepted"] == 2
    assert ingest(client, headers, "node-a", batch)["duplicates"] == 2  # the agent resends after a lost answer
    too_high = client.post(
        "/api/v1/ingest",
        json={"node_id": "node-a", "samples": [gpu_sample(3, clock(), gpu_utilization_ratio=1.5)]},
        headers=headers,
    )
    no_token = client.post("/api/v1/ingest", json={"node_id": "node-a", "samples": [gpu_sample(4, clock())]})
    wrong_token = client.post(
        "/api/v1/ingest",
        json={"node_id": "node-a", "samples": [gpu_sample(5, clock())]},
        headers={"Authorization": "Bearer fp_not_a_token"},
    )
    other_node = client.post(
        "/api/v1/ingest",
        json={"node_id": "node-a", "samples": [gpu_sample(6, clock())]},
        headers=auth("agent", node_id="node-b"),
    )
    assert (too_high.status_code, no_token.status_code, wrong_token.status_code, other_node.status_code) == (
        422,
        401,
        401,
        403,
    )

    after = scrape(client)

    assert after.value("fleetpilot_collector_ingested_samples_total", outcome="accepted") == 2.0
    assert after.value("fleetpilot_collector_ingested_samples_total", outcome="duplicate") == 2.0
    assert after.value("fleetpilot_collector_rejected_requests_total", reason="invalid") == 1.0
    assert after.value("fleetpilot_collector_rejected_requests_total", reason="unauthorized") == 2.0
    assert after.value("fleetpilot_collector_rejected_requests_total", reason="forbidden") == 1.0
    assert after.value("fleetpilot_collector_rejected_requests_total", reason="too_large") == 0.0
    assert after.series("fleetpilot_collector_ingest_requests_total") == {
        labels(code="200"): 2.0,
        labels(code="422"): 1.0,
        labels(code="401"): 2.0,
        labels(code="403"): 1.0,
    }
    # The histogram times body-to-commit, so it counts the two committed requests and none of the rejected ones.
    assert after.value("fleetpilot_collector_ingest_duration_seconds_count") == 2.0
    assert after.value("fleetpilot_collector_ingest_duration_seconds_bucket", le="+Inf") == 2.0
    duration_sum = after.value("fleetpilot_collector_ingest_duration_seconds_sum")
    assert duration_sum is not None
    assert 0.0 < duration_sum < 60.0
    # Nothing of the rejected requests reached storage: the latest value is still the accepted sample's.
    assert after.value("fleetpilot_gpu_utilization_ratio", node="node-a", gpu="0", pool="") == 0.5


@pytest.mark.prometheus
@pytest.mark.parametrize("fleet", ["empty", "busy"])
def test_promtool_accepts_the_exposition(client: TestClient, auth: AuthHeaders, clock: FakeClock, fleet: str) -> None:
    require_program("promtool")  # skip before doing any work
    if fleet == "busy":
        # Every metric on two nodes, one of them down, and every kind of answer the ingest endpoint gives.
        headers = auth("agent", node_id="node-a")
        ingest(client, headers, "node-a", every_metric_once(1, clock(), device=0))
        clock.advance(5.0)
        ingest(client, auth("agent", node_id="node-b"), "node-b", every_metric_once(1, clock(), device=3, pool="clip"))
        ingest(client, auth("agent", node_id="node-b"), "node-b", every_metric_once(1, clock(), device=3, pool="clip"))
        client.post("/api/v1/ingest", json={"node_id": "node-a", "samples": [{"seq": "x"}]}, headers=headers)
        client.post("/api/v1/ingest", json={"node_id": "node-a", "samples": []})
    metrics = scrape(client)
    if fleet == "busy":
        assert metrics.value("fleetpilot_node_up", node="node-a") == 0.0
        assert metrics.value("fleetpilot_gpu_power_watts", node="node-b", gpu="3", pool="") == 312.5

    verdict = promtool_check_metrics(metrics.text.encode())

    assert verdict.clean, f"promtool check metrics exited {verdict.returncode}:\n{verdict.output}"
