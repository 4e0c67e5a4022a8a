"""The charts' data: raw samples for the live 15 minutes (and each live update's new ones), rollups beyond, one
window per page, compact aligned columns; and the pools' "at max (wants N)" / "at min" states."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from autoscaler.scaling_events import EventStore, ScalingEvent
from collector.series import series_samples
from collector.tables import rollups_1m
from fleet.pools import PoolSpec, Provisioning
from fleet.scaling_log import Outcome
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from tests.support.clock import FakeClock
from tests.support.rollups import rollup_row
from tests.web.dashboard.conftest import push
from web.dashboard.charts import Line, table
from web.dashboard.pages.pools import bound_state
from web.services import AppServices

Browser = Callable[[str], TestClient]


def _chart_data(html: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>', html, re.S)
    assert found is not None
    return dict(json.loads(found.group(1)))


def _events(client: TestClient, path: str) -> list[dict[str, Any]]:
    with client.stream("GET", path) as stream:
        return [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]


def test_a_table_aligns_its_lines_in_ms_after_its_origin_to_four_digits() -> None:
    lines = [
        Line("gpu-0", "GPU 0", [(100.0, 0.123456), (100.5, 0.5)]),
        Line("gpu-1", "GPU 1", [(100.5, 61203283968.0)]),
    ]
    assert table(lines, 99.0) == {
        "origin": 99.0,
        "merge": True,
        "keys": ["gpu-0", "gpu-1"],
        "x": [1000, 1500],
        "y": [[0.1235, 0.5], [None, 6.12e10]],
    }
    assert table([], 0.0, merge=False)["x"] == []


def test_raw_samples_per_series_after_a_time(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    client = browser("viewer")
    seq = push(services, client, "node-a", clock, gpus=2)
    first = clock()
    clock.advance(0.5)
    push(services, client, "node-a", clock, seq=seq, gpus=2, request_rate_per_second=7.0)
    with services.engine.connect() as conn:
        everything = series_samples(conn, "node-a", first - 1, clock())
        newer = series_samples(conn, "node-a", first, clock())
        capped = series_samples(conn, "node-a", first - 1, clock(), limit=2)
    assert [ts for ts, _ in everything[("node-a", 1, "")]["gpu_temperature_celsius"]] == [first, clock()]
    assert set(newer) == {("node-a", 0, ""), ("node-a", 1, ""), ("node-a", -1, "chat")}
    assert newer[("node-a", -1, "chat")]["request_rate_per_second"] == [(clock(), 7.0)]
    assert all(len(points) == 1 for metrics in newer.values() for points in metrics.values())
    assert sum(len(m["gpu_temperature_celsius"]) for m in capped.values() if "gpu_temperature_celsius" in m) == 2


def test_the_node_page_draws_its_15_minutes_of_samples_a_line_per_gpu(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    seq = push(services, client, "node-a", clock, gpus=2)
    clock.advance(0.5)
    push(services, client, "node-a", clock, seq=seq, gpus=2)
    data = _chart_data(client.get("/nodes/node-a").text)
    assert data["window"] == {
        "key": "15m",
        "label": "15 min",
        "seconds": 900.0,
        "ahead": 0.0,
        "live": True,
        "step": 1.0,
        "now": clock(),
    }
    charts = {c["id"]: c for c in data["charts"]}
    temperature = charts["gpu_temperature_celsius"]
    assert temperature["title"] == "GPU temperature" and temperature["unit"] == "celsius"
    assert temperature["lines"] == {
        "gpu-0": {"name": "GPU 0", "style": "line"},
        "gpu-1": {"name": "GPU 1", "style": "line"},
    }
    [samples] = temperature["tables"]
    assert samples["x"] == [899_500, 900_000] and samples["y"] == [[60.0, 60.0], [60.0, 60.0]]  # 500 ms apart
    assert charts["request_rate_per_second"]["title"] == "Requests/s"
    assert data["since"] == clock()  # the live updates go on from the newest sample
    assert set(data["meta"]) >= {"kv_cache_utilization_ratio"}  # a metric that appears later gets its chart


def test_a_live_update_carries_only_the_samples_after_since(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    seq = push(services, client, "node-a", clock, gpus=1)
    since = clock()
    clock.advance(0.5)
    push(services, client, "node-a", clock, seq=seq, gpus=1, request_rate_per_second=3.0)
    [event] = _events(client, f"/nodes/node-a/live?events=1&since={since}")
    assert event["now"] == clock()
    [tail] = event["charts"]["gpu_temperature_celsius"]
    assert tail["keys"] == ["gpu-0"] and tail["origin"] == since and tail["x"] == [500]
    assert event["charts"]["request_rate_per_second"][0]["y"] == [[3.0]]
    [plain] = _events(client, "/nodes/node-a/live?events=1")
    assert "charts" not in plain  # a page without a live chart (a rollup range) gets the values only
    refused = client.get("/nodes/node-a/live?events=1&since=nan")
    assert refused.status_code == 422 and "since" in refused.text  # not a stream that never sends a sample


def test_longer_ranges_are_rollups_and_a_wrong_range_is_refused(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    push(services, client, "node-a", clock, gpus=1)
    with services.engine.begin() as conn:
        minutes = [clock() - 60 * k for k in (30, 20, 10)]
        conn.execute(insert(rollups_1m), [rollup_row("node-a", 0, "", t, gpu_power_watts=300.0) for t in minutes])
    page = client.get("/nodes/node-a?range=6h")
    assert "1-minute means" in page.text and 'aria-current="true">6 h<' in page.text
    data = _chart_data(page.text)
    assert data["window"]["live"] is False and data["window"]["seconds"] == 21_600.0
    [power] = [c for c in data["charts"] if c["id"] == "gpu_power_watts"]
    assert len(power["tables"][0]["x"]) == 3  # the three minutes, not the raw sample
    answer = client.get("/nodes/node-a?range=2d")
    assert answer.status_code == 422 and "range" in answer.text


def test_the_pool_page_shares_one_window_with_the_forecast_ahead(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    services.pools.create(
        "chat", PoolSpec(min_replicas=1, max_replicas=6, slo_p99_seconds=0.5, replica_capacity=10.0), now=clock()
    )
    push(services, client, "node-a", clock, request_rate_per_second=12.0)
    data = _chart_data(client.get("/pools/chat").text)
    assert data["window"]["seconds"] == 900.0 and data["window"]["ahead"] == 900.0
    replicas, demand = data["charts"]
    assert replicas["id"] == "replicas" and [t["keys"] for t in replicas["tables"]] == [
        ["running", "ready"],
        ["desired"],
    ]
    assert demand["title"].startswith("Requests/s") and demand["unit"] == "per_second"
    assert [t["keys"] for t in demand["tables"]] == [["demand"], ["capacity"]]
    assert demand["tables"][0]["y"] == [[12.0]] and demand["tables"][1]["y"] == [[10.0]]  # 1 ready × 10/s
    [event] = _events(client, "/pools/chat/live?events=1")
    assert event["ready"] == "1" and set(event["charts"]) == {"replicas", "demand"}
    assert event["charts"]["demand"][0]["y"] == [[12.0]]  # the last 30 s, merged over what the page holds
    assert client.get("/pools/ghost/live?events=1").status_code == 404


@pytest.mark.parametrize(
    ("desired", "wanted", "state"),
    [
        (6, 9, ("at max (wants 9)", "warn")),
        (6, None, ("at max", "")),
        (1, 0, ("at min", "")),
        (3, None, None),
        (None, None, None),
    ],
)
def test_a_pool_says_when_its_bounds_hold_it(
    services: AppServices, clock: FakeClock, desired: int | None, wanted: int | None, state: tuple[str, str] | None
) -> None:
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=6), now=clock())
    if desired is not None:
        services.pools.set_desired("chat", desired)
    services.pools.set_provisioning("chat", Provisioning(None, 60.0, 0, clock(), wanted))
    pool = services.pools.get("chat")
    assert pool is not None and bound_state(pool) == state


def test_the_pools_list_shows_the_bound_state(browser: Browser, services: AppServices, clock: FakeClock) -> None:
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=2), now=clock())
    services.pools.set_desired("chat", 2)
    services.pools.set_provisioning("chat", Provisioning(None, 60.0, 0, clock(), 5))
    page = browser("viewer").get("/pools")
    assert '<span class="badge bound warn" data-bound>at max (wants 5)</span>' in page.text


def test_a_pools_minutes_before_its_samples_come_from_rollups_and_its_band_stops_at_zero(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=6), now=clock())
    with services.engine.begin() as conn:  # imported history: 1-minute means only (the demo seeds such hours)
        minutes = [(clock() // 60 - k) * 60 for k in (12, 11, 10)]
        rows = [rollup_row("node-a", -1, "chat", t, request_rate_per_second=2.0) for t in minutes]
        conn.execute(insert(rollups_1m), rows)
    push(services, client, "node-a", clock, request_rate_per_second=3.0)
    now = clock()
    points = [ForecastPoint(now + 60 * k, -1.0, -4.0, 5.0) for k in range(1, 16)]  # a model's band past zero
    metric = "request_rate_per_second"
    ForecastStore(services.engine).save(
        [GoodForecast(SubjectKind.POOL, "chat", metric, now, "auto", now, 60.0, 900.0, now - 3600, now, points, None)]
    )
    data = _chart_data(client.get("/pools/chat").text)
    demand = data["charts"][1]
    history = demand["tables"][0]
    assert history["y"][0] == [2.0, 2.0, 2.0, 3.0]  # three minutes of means, then the raw sample
    band = next(t for t in demand["tables"] if t["keys"][0] == "hi")
    assert min(v for column in band["y"] for v in column if v is not None) == 0.0  # never below no demand


def test_the_desired_line_starts_when_the_pool_was_created_and_a_remote_write_pool_has_a_ready_line(
    browser: Browser, services: AppServices, clock: FakeClock
) -> None:
    """Issue 39: the desired line was drawn back to before the pool existed, and a pool whose replicas are external
    engines (remote write: no node reports) had no ready line."""
    client = browser("viewer")
    with services.engine.begin() as conn:  # an engine seen only through its series: 3 rolled-up minutes on gpu-7
        minutes = [(clock() // 60 - k) * 60 for k in (4, 3, 2)]
        rows = [rollup_row("gpu-7", -1, "chat", t, request_rate_per_second=2.0) for t in minutes]
        conn.execute(insert(rollups_1m), rows)
    clock.advance(60)
    created = clock()
    services.pools.create("chat", PoolSpec(min_replicas=1, max_replicas=6), now=created)
    clock.advance(60)
    event = ScalingEvent("chat", clock(), 1, 2, "reactive", "up", {}, Outcome.DRY_RUN, "local", None)
    EventStore(services.engine).add(event)
    services.pools.set_desired("chat", 2)
    clock.advance(60)
    replicas = _chart_data(client.get("/pools/chat?range=1h").text)["charts"][0]
    desired = next(t for t in replicas["tables"] if t["keys"] == ["desired"])
    first = desired["origin"] + min(desired["x"]) / 1000.0
    assert first >= created  # nothing before the pool existed (the window opens an hour before)
    ready = next(t for t in replicas["tables"] if "ready" in t["keys"])
    values = [v for v in ready["y"][ready["keys"].index("ready")] if v is not None]
    assert values and max(values) == 1.0  # the engine is one ready replica, as the fleet view counts it
