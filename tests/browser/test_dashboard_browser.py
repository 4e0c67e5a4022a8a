"""The dashboard as an operator uses it, in headless Chromium against a real server with a real agent pushing:
sign in, watch a node's metrics update live, edit a quota and see an impossible one refused, scale a pool, silence
an alert. Each page is saved as a screenshot under tests/artifacts/screenshots/ for a person to look at."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert

from autoscaler.scaling_events import EventStore, ScalingEvent
from collector.database import make_engine
from collector.tables import rollups_1m
from fleet.scaling_log import Outcome
from fleetpilot.launch import ServerProcess
from predictor.store import ForecastPoint, ForecastStore, GoodForecast, SubjectKind
from tests.browser.conftest import replaying_agent, signed_in, wait_for
from tests.support.rollups import rollup_row

pytestmark = [pytest.mark.browser, pytest.mark.slow]
NODE = "gpu-node-1"


class Fleet:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.admin = {"Authorization": f"Bearer {server.admin_token}"}

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        answer = httpx.request(method, f"{self.server.url}/api/v1{path}", headers=self.admin, timeout=10, **kwargs)
        assert answer.status_code < 300, answer.text
        return answer


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("browser")
    with ServerProcess(f"sqlite:///{tmp}/dashboard.db") as server, replaying_agent(server, tmp, NODE):
        found = Fleet(server)
        found.api("POST", "/pools", json={"name": "chat", "min_replicas": 1, "max_replicas": 6})
        found.api(
            "POST",
            "/tenants",
            json={
                "name": "acme",
                "slo_class": "standard",
                "quotas": {"chat": {"rate_rps": 20, "max_concurrency": 8}},
            },
        )
        found.api(
            "POST",
            "/alert-rules",
            json={
                "name": "GpuWarm",
                "kind": "threshold",
                "metric": "gpu_temperature_celsius",
                "op": ">=",
                "threshold": 0,
                "for_seconds": 0,
                "severity": "warning",
            },
        )
        yield found


@pytest.fixture
def page(chromium: Any, fleet: Fleet) -> Iterator[Any]:
    # a refused form answers 422 on purpose; any other console error (a CSP violation, a failed script) counts
    with signed_in(chromium, fleet.server.url, fleet.server.admin_token, allowed_errors=("status of 422",)) as page:
        yield page


def test_login_page(chromium: Any, fleet: Fleet, screenshots: Path) -> None:
    context = chromium.new_context(viewport={"width": 1360, "height": 700}, base_url=fleet.server.url)
    page = context.new_page()
    page.goto("/pools")
    assert "/login" in page.url
    page.fill("#token", "fp_wrong")
    page.click("button:has-text('Sign in')")
    assert page.locator(".notice.error").inner_text() == "That token is not valid."
    page.screenshot(path=str(screenshots / "login.png"))
    context.close()


def test_fleet_and_a_nodes_live_metrics(page: Any, screenshots: Path) -> None:
    page.wait_for_selector(f'[data-node="{NODE}"]')
    assert "2 GPUs" in page.locator(f'[data-node="{NODE}"]').inner_text()
    page.screenshot(path=str(screenshots / "fleet.png"), full_page=True)
    page.click(f"text={NODE}")
    page.wait_for_selector("#live-flag")
    # (polled from Python: the page's CSP forbids the eval that page.wait_for_function would need)
    wait_for(lambda: int(page.get_attribute("#live-flag", "data-events") or 0) >= 1, page)
    first_ts = page.get_attribute("#live-flag", "data-ts")
    wait_for(lambda: page.get_attribute("#live-flag", "data-ts") != first_ts, page)  # newer samples, shown live
    assert int(page.get_attribute("#live-flag", "data-events") or 0) >= 2
    temperature = page.locator('[data-series="gpu-0"][data-metric="gpu_temperature_celsius"]').inner_text()
    assert temperature.endswith("°C"), temperature
    assert page.locator("#live-status").inner_text() == "up"
    page.screenshot(path=str(screenshots / "node.png"), full_page=True)


def test_scale_a_pool_and_switch_dry_run(page: Any, screenshots: Path) -> None:
    page.goto("/pools")
    page.screenshot(path=str(screenshots / "pools.png"), full_page=True)
    page.click("text=chat")
    page.fill('#scale-form input[name="replicas"]', "3")
    page.fill('#scale-form input[name="reason"]', "launch day")
    page.click("button:has-text('Scale by hand')")
    page.wait_for_selector("text=Manual scale recorded")
    assert page.locator("#pool-manual").inner_text().startswith("3 until")
    page.click("button:has-text('Switch to dry run')")
    page.wait_for_selector("text=Mode changed.")
    assert page.locator("h1 .badge").inner_text() == "dry run"
    page.wait_for_selector('[data-chart="demand"] .chart-empty')  # no demand reported yet: said, not drawn empty
    page.screenshot(path=str(screenshots / "pool.png"), full_page=True)


def test_an_impossible_quota_is_refused_with_its_reason(page: Any, screenshots: Path) -> None:
    page.goto("/tenants")
    page.click("text=Edit quotas and class")
    form = page.locator('form[data-form="acme/chat"]')
    form.locator('input[name="gpu_memory_mib"]').fill("200000")
    form.locator("button").click()
    error = page.locator('form[data-form="acme/chat"] .field-error')
    error.wait_for()
    assert "would pin 200,064 MiB on a GPU of 81,559 MiB" in error.inner_text()
    page.screenshot(path=str(screenshots / "tenants-invalid-quota.png"), full_page=True)
    form = page.locator('form[data-form="acme/chat"]')
    form.locator('input[name="gpu_memory_mib"]').fill("20000")
    form.locator("button").click()
    page.wait_for_selector("text=Quota saved.")
    assert "20096 MiB" in page.locator('[data-tenant="acme"] table').inner_text()  # rounded up to MPS's 128 MiB
    page.screenshot(path=str(screenshots / "tenants.png"), full_page=True)


def test_silence_a_firing_alert(page: Any, screenshots: Path) -> None:
    for _ in range(40):  # the rule fires at the first evaluation that sees a sample (every second)
        page.goto("/alerts?state=firing")
        if page.locator('tr[data-alert="GpuWarm"]').count():
            break
        page.wait_for_timeout(500)
    row = page.locator('tr[data-alert="GpuWarm"]').first
    row.locator("button:has-text('Silence 1 h')").click()
    page.wait_for_selector("text=Silence created.")
    assert page.locator('tr[data-alert="GpuWarm"] .badge:has-text("silenced")').count() >= 1
    page.screenshot(path=str(screenshots / "alerts.png"), full_page=True)


def test_health_and_settings_pages(page: Any, screenshots: Path) -> None:
    page.goto("/health")
    assert page.locator("#size-class").inner_text() == "1–8 GPUs"
    page.screenshot(path=str(screenshots / "health.png"), full_page=True)
    page.goto("/settings")
    page.select_option('select[name="role"]', "viewer")
    page.fill('input[name="name"]', "wallboard")
    page.click("button:has-text('Create token')")
    assert page.locator("#new-token code").inner_text().startswith("fp_")
    page.screenshot(path=str(screenshots / "settings.png"), full_page=True)


def _seed_history(database_url: str) -> None:
    """Rolled-up minutes, a forecast and a scaling event written straight into the server's database: rollups take
    real minutes to appear, and this test checks the charts draw (axes, traces, band), not the figures."""
    now = time.time()
    minutes = [now - 60 * (30 - i) for i in range(30)]
    rows = [
        rollup_row(
            NODE,
            d,
            "",
            t,
            gpu_utilization_ratio=0.4 + 0.1 * d + 0.02 * (i % 5),
            gpu_power_watts=300.0 + 5 * i,
            gpu_temperature_celsius=55.0 + i / 3,
        )
        for d in (0, 1)
        for i, t in enumerate(minutes)
    ]
    rows += [rollup_row(NODE, -1, "chat", t, request_rate_per_second=20 + i) for i, t in enumerate(minutes)]
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(rollups_1m), rows)
        points = [ForecastPoint(now + 60 * k, 50 + 2 * k, 45 + k, 55 + 3 * k) for k in range(1, 16)]
        ForecastStore(engine).save(
            [
                GoodForecast(
                    SubjectKind.POOL,
                    "chat",
                    "request_rate_per_second",
                    now,
                    "ets",
                    now,
                    60.0,
                    900.0,
                    now - 3600,
                    now,
                    points,
                    {"probability": 0.62, "eta_seconds": 540.0, "capacity": 70.0},
                )
            ]
        )
        EventStore(engine).add(
            ScalingEvent(
                "chat",
                now - 300,
                1,
                2,
                "hybrid",
                "ForecastSaturation: the 90% band crosses capacity in 9 min",
                {},
                Outcome.APPLIED,
                "local",
            )
        )
    finally:
        engine.dispose()


def test_charts_draw_the_last_hour_and_the_forecast(page: Any, fleet: Fleet, screenshots: Path) -> None:
    _seed_history(fleet.server.database_url)
    page.goto(f"/nodes/{NODE}?range=1h")
    temperature = page.locator('[data-chart="gpu_temperature_celsius"]')
    temperature.wait_for()
    assert temperature.get_attribute("data-keys") == "gpu-0,gpu-1"  # one line per GPU
    assert int(temperature.get_attribute("data-points") or 0) >= 30  # the seeded half hour of minutes
    page.screenshot(path=str(screenshots / "node-history.png"), full_page=True)
    page.goto("/")
    assert page.locator(f'[data-node="{NODE}"] svg.spark').count() >= 3
    page.screenshot(path=str(screenshots / "fleet-sparklines.png"), full_page=True)
    page.goto("/pools/chat?range=1h")
    demand = page.locator('[data-chart="demand"]')
    demand.wait_for()
    # the quantile the policy sizes for ("sized"); no capacity line: none configured
    assert demand.get_attribute("data-keys") == "demand,hi,lo,forecast,sized,limit"
    assert demand.locator(".u-legend").filter(has_text="90 % band").count() == 1
    page.screenshot(path=str(screenshots / "pool-forecast.png"), full_page=True)
