"""Series queries: raw for short ranges, rollups for long ones, pools combined over replicas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from collector.aggregate import Stat, percentile, reduce_rollups, reduce_values
from collector.catalog import PoolAggregate
from collector.errors import InvalidQuery
from collector.series import SeriesQuery, bucketize, combine_buckets
from collector.tables import NO_POOL, rollup_column, rollups_1m
from tests.conftest import pool_sample
from tests.support.clock import FakeClock

Auth = Callable[..., dict[str, str]]


@pytest.mark.parametrize(
    ("values", "stat", "expected"),
    [
        ([1.0, 2.0, 3.0, 6.0], Stat.MEAN, 3.0),
        ([4.0, 2.0, 9.0], Stat.MIN, 2.0),
        ([4.0, 2.0, 9.0], Stat.MAX, 9.0),
        ([float(v) for v in range(1, 101)], Stat.P99, 99.0),  # nearest rank: ceil(0.99 × 100) = 99th value
        ([float(v) for v in range(1, 11)], Stat.P99, 10.0),  # ceil(0.99 × 10) = 10th value
    ],
)
def test_reduce_values(values: list[float], stat: Stat, expected: float) -> None:
    assert reduce_values(values, stat) == expected


def test_coarser_p99_is_the_largest_finer_p99() -> None:
    assert reduce_rollups([0.1, 0.4, 0.2], Stat.P99) == 0.4
    assert reduce_rollups([0.1, 0.4, 0.2], Stat.MEAN) == pytest.approx(0.7 / 3)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 99)


def test_bucketize_then_combine_sums_rates_and_maxes_latency() -> None:
    replica_a = [(0.0, 10.0), (0.5, 20.0), (1.0, 30.0)]
    replica_b = [(0.2, 5.0), (1.4, 7.0)]
    per_series = [bucketize(p, 1.0, lambda vs: reduce_values(vs, Stat.MEAN)) for p in (replica_a, replica_b)]
    assert combine_buckets(per_series, PoolAggregate.SUM) == [(0.0, 20.0), (1.0, 37.0)]
    assert combine_buckets(per_series, PoolAggregate.MAX) == [(0.0, 15.0), (1.0, 30.0)]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"metric": "gpu_fan"}, "metric"),
        ({"start": 10.0, "end": 5.0}, "start/end"),
        ({"step": 0.0}, "step"),
        ({"step": 0.001}, "step"),
    ],
)
def test_bad_query_names_the_parameter(kwargs: dict[str, Any], field: str) -> None:
    values: dict[str, Any] = {"metric": "gpu_utilization_ratio", "start": 0.0, "end": 900.0, **kwargs}
    with pytest.raises(InvalidQuery, match=f"^{field}"):
        SeriesQuery(**values)


def _push(client: TestClient, auth: Auth, node: str, rows: list[dict[str, Any]]) -> None:
    answer = client.post("/api/v1/ingest", json={"node_id": node, "samples": rows}, headers=auth("agent", node))
    assert answer.status_code == 200, answer.text


def test_single_series_returns_raw_points(client: TestClient, auth: Auth, clock: FakeClock) -> None:
    t0 = clock()
    _push(
        client, auth, "node-a", [pool_sample(i, t0 - 10 + i * 0.5, request_rate_per_second=float(i)) for i in range(4)]
    )
    answer = client.get(
        "/api/v1/series", params={"metric": "request_rate_per_second", "node": "node-a"}, headers=auth("viewer")
    ).json()
    assert answer["source"] == "raw"
    assert answer["points"] == [[t0 - 10 + i * 0.5, float(i)] for i in range(4)]


def test_pool_series_sums_rates_and_maxes_latency_over_replicas(
    client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    t0 = 1_764_424_800.0  # a whole second, so both replicas' samples share buckets
    _push(
        client, auth, "node-a", [pool_sample(1, t0 - 5, request_rate_per_second=10.0, request_latency_p99_seconds=0.2)]
    )
    _push(
        client,
        auth,
        "node-b",
        [pool_sample(1, t0 - 5 + 0.3, request_rate_per_second=4.0, request_latency_p99_seconds=0.5)],
    )
    _push(client, auth, "node-b", [pool_sample(2, t0 - 5, pool="other", request_rate_per_second=99.0)])
    viewer = auth("viewer")
    params = {"pool": "llama-8b", "start": str(t0 - 60), "end": str(t0)}
    rate = client.get("/api/v1/series", params={**params, "metric": "request_rate_per_second"}, headers=viewer)
    assert rate.json()["points"] == [[t0 - 5, 14.0]]
    p99 = client.get("/api/v1/series", params={**params, "metric": "request_latency_p99_seconds"}, headers=viewer)
    assert p99.json()["points"] == [[t0 - 5, 0.5]]


def test_iso_times_are_accepted(client: TestClient, auth: Auth, clock: FakeClock) -> None:
    _push(client, auth, "node-a", [pool_sample(1, 1_764_424_790.0)])
    params = {"metric": "queue_depth_requests", "start": "2025-11-29T13:59:00Z", "end": "2025-11-29T14:00:00+00:00"}
    answer = client.get("/api/v1/series", params=params, headers=auth("viewer"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["points"] == [[1_764_424_790.0, 1.0]]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"metric": "nope"}, "metric"),
        ({"metric": "queue_depth_requests", "start": "last tuesday"}, "start"),
        ({"metric": "queue_depth_requests", "start": "100", "end": "50"}, "start/end"),
    ],
)
def test_bad_parameters_are_422_naming_them(client: TestClient, auth: Auth, params: dict[str, str], named: str) -> None:
    answer = client.get("/api/v1/series", params=params, headers=auth("viewer"))
    assert answer.status_code == 422
    assert answer.json()["error"]["message"].startswith(named)


def test_long_ranges_read_rollups(client: TestClient, auth: Auth, engine: Engine, clock: FakeClock) -> None:
    metric = "gpu_utilization_ratio"
    rows = [
        {
            "node_id": "node-a",
            "device": 0,
            "pool": NO_POOL,
            "bucket": clock() - 7200 + m * 60,
            "samples": 120,
            rollup_column(metric, "mean"): 0.1 * m,
            rollup_column(metric, "p99"): 0.2 * m,
        }
        for m in range(3)
    ]
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rows)
    params = {"metric": metric, "node": "node-a", "device": "0", "start": str(clock() - 86400)}
    viewer = auth("viewer")
    mean = client.get("/api/v1/series", params=params, headers=viewer).json()
    assert mean["source"] == "rollup"
    assert mean["points"] == [[r["bucket"], pytest.approx(0.1 * m)] for m, r in enumerate(rows)]
    p99 = client.get("/api/v1/series", params={**params, "stat": "p99", "step": "180"}, headers=viewer).json()
    assert len(p99["points"]) == 1
    assert p99["points"][0][1] == pytest.approx(0.4)
