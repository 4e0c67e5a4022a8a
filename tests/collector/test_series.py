"""Series queries: raw for short ranges, rollups for long ones, pools combined over replicas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from collector.aggregate import Stat, reduce_rollups, reduce_values
from collector.errors import InvalidQuery
from collector.rollups import WATERMARK_NAME, RollupJob
from collector.series import SeriesQuery, bucketize, combine_buckets, query_series, raw_tail_start
from collector.tables import NO_DEVICE, NO_POOL, job_state, rollup_column, rollups_1m
from tests.conftest import pool_sample
from tests.support.clock import FakeClock
from wire.catalog import PoolAggregate
from wire.percentile import percentile

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


def _rolled_until(engine: Engine, watermark: float) -> None:
    with engine.begin() as conn:
        conn.execute(insert(job_state), [{"name": WATERMARK_NAME, "watermark": watermark}])


def test_a_range_just_past_the_raw_limit_answers_the_minutes_not_rolled_yet_from_raw_samples(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    t0 = clock()  # 1_764_424_800: a whole minute
    metric = "request_rate_per_second"
    rolled = [
        {"node_id": "node-a", "device": NO_DEVICE, "pool": "llama-8b", "bucket": t0 - 180 + m * 60, "samples": 120}
        | {rollup_column(metric, "mean"): float(m + 1)}
        for m in range(2)
    ]
    with engine.begin() as conn:
        conn.execute(insert(rollups_1m), rolled)
    _rolled_until(engine, t0 - 60)
    # A raw sample of a rolled minute is read from its rollup (1.0), never twice; the open minute's two fresh
    # samples (7 and 9) are its mean, 8.
    fresh = [(t0 - 170, 50.0), (t0 - 50, 7.0), (t0 - 20, 9.0)]
    _push(client, auth, "node-a", [pool_sample(i, ts, request_rate_per_second=v) for i, (ts, v) in enumerate(fresh)])
    params = {"metric": metric, "pool": "llama-8b", "start": str(t0 - 3660)}  # 61 minutes: past the 3,600 s limit
    viewer = auth("viewer")
    answer = client.get("/api/v1/series", params=params, headers=viewer).json()
    assert answer["source"] == "rollup"
    assert answer["points"] == [[t0 - 180, 1.0], [t0 - 120, 2.0], [t0 - 60, 8.0]]
    coarse = client.get("/api/v1/series", params={**params, "step": "180"}, headers=viewer).json()
    assert coarse["points"] == [[t0 - 180, pytest.approx((1.0 + 2.0 + 8.0) / 3)]]


def test_a_long_range_answers_the_same_before_and_after_its_newest_minutes_are_rolled(
    client: TestClient, auth: Auth, engine: Engine, clock: FakeClock
) -> None:
    t0 = clock()
    rows = [pool_sample(i, t0 - 150 + 7.5 * i, request_rate_per_second=float(i % 5)) for i in range(20)]
    _push(client, auth, "node-a", rows)
    query = SeriesQuery("request_rate_per_second", t0 - 7200, t0, pool="llama-8b")
    RollupJob(engine).run(t0 - 90)  # rolls [t0 - 180, t0 - 120): the last two minutes stay raw
    with engine.connect() as conn:
        stitched = query_series(conn, query, raw_max_seconds=3600)
    RollupJob(engine).run(t0 + 60)  # now every minute is rolled
    with engine.connect() as conn:
        rolled = query_series(conn, query, raw_max_seconds=3600)
    assert stitched.points == rolled.points
    assert [ts for ts, _ in rolled.points] == [t0 - 180, t0 - 120, t0 - 60]


END = 1_000_020.0  # a whole minute


@pytest.mark.parametrize(
    ("watermark", "start", "expected"),
    [
        (None, END - 7200, END - 3600),  # nothing rolled yet: the last hour, as much as a raw query reads
        (END - 120, END - 7200, END - 120),  # rolled until two minutes ago: raw from there
        (END - 7000, END - 7200, END - 3600),  # a stalled job: still no more than the last hour of raw samples
        (END - 300, END - 90.5, END - 60),  # a range starting past the watermark: from its first whole minute
    ],
)
def test_raw_tail_starts_at_the_watermark_and_reads_at_most_the_raw_limit(
    engine: Engine, watermark: float | None, start: float, expected: float
) -> None:
    if watermark is not None:
        _rolled_until(engine, watermark)
    query = SeriesQuery("request_rate_per_second", start, END)
    with engine.connect() as conn:
        assert raw_tail_start(conn, query, raw_max_seconds=3600) == expected
