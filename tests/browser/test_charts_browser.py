"""The node and pool pages' charts in their first minute, in headless Chromium against a real server and agent.

A fresh server, an agent replaying a recorded two-GPU H100 at the real 500 ms: the node page opens with the first
samples (0 or 1 point per line), so what is checked is what a new user sees then: one time range on every chart,
y-axes in the metric's unit that do not repeat one label, a line per GPU, and the 500 ms chart growing live (the
samples appended from the page's server-sent events, no reload). Screenshots go to tests/artifacts/screenshots.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from tests.browser.conftest import replaying_agent, signed_in, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]
NODE = "chart-node-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("charts")
    with ServerProcess(f"sqlite:///{tmp}/charts.db") as server:
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        pool = {"name": "chat", "min_replicas": 1, "max_replicas": 4, "slo": {"latency_p99_seconds": 2.0}}
        assert httpx.post(f"{server.url}/api/v1/pools", json=pool, headers=admin, timeout=10).status_code == 201
        with replaying_agent(server, tmp, NODE):
            yield server


@pytest.fixture
def page(chromium: Any, server: ServerProcess) -> Iterator[Any]:
    with signed_in(chromium, server.url, server.admin_token) as page:  # no CSP violation (style-src 'self' too)
        yield page


def _chart(page: Any, metric: str) -> Any:
    return page.locator(f'[data-chart="{metric}"]')


def _ticks(page: Any, metric: str) -> list[str]:
    return (_chart(page, metric).get_attribute("data-y-ticks") or "").split("|")


def test_the_node_page_in_its_first_seconds(page: Any, screenshots: Path) -> None:
    page.goto(f"/nodes/{NODE}")
    temperature = _chart(page, "gpu_temperature_celsius")
    temperature.wait_for()
    wait_for(lambda: temperature.get_attribute("data-x-span") is not None, page)
    page.screenshot(path=str(screenshots / "node-first-seconds.png"), full_page=True)
    assert temperature.get_attribute("data-keys") == "gpu-0,gpu-1"  # a line per GPU
    for metric in ("gpu_temperature_celsius", "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts"):
        assert _chart(page, metric).get_attribute("data-x-span") == "900"  # the page's one range, whatever the points
        ticks = _ticks(page, metric)
        assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), (metric, ticks)  # never "0 % 0 % 0 %"
    assert all(t.endswith(" °C") for t in _ticks(page, "gpu_temperature_celsius"))
    assert all(t.endswith(" %") for t in _ticks(page, "gpu_utilization_ratio"))
    assert _ticks(page, "gpu_utilization_ratio")[0] == "0 %" and _ticks(page, "gpu_utilization_ratio")[-1] == "100 %"
    assert all(t.endswith("iB") for t in _ticks(page, "gpu_memory_used_bytes"))
    rtt = _ticks(page, "network_latency_seconds")
    assert all(t.endswith(" ms") for t in rtt), rtt  # the push RTT in ms, as its card says
    assert page.locator('[data-chart="gpu_power_watts"] .u-title').inner_text() == "GPU power draw"


def test_the_500_ms_chart_grows_live_without_a_reload(page: Any, screenshots: Path) -> None:
    page.goto(f"/nodes/{NODE}")
    power = _chart(page, "gpu_power_watts")
    power.wait_for()
    wait_for(lambda: power.get_attribute("data-points") is not None, page)
    before = int(power.get_attribute("data-points") or 0)
    marker = page.locator("#live-flag").get_attribute("data-events")
    wait_for(lambda: int(power.get_attribute("data-points") or 0) >= before + 4, page)  # two seconds of samples
    assert int(page.locator("#live-flag").get_attribute("data-events") or 0) > int(marker or 0)
    assert page.url.endswith(f"/nodes/{NODE}")  # the same page: appended, not reloaded
    page.screenshot(path=str(screenshots / "node-live.png"), full_page=True)


def test_a_metric_that_first_arrives_live_gets_a_chart_of_its_own(page: Any, server: ServerProcess) -> None:
    """The push RTT comes with an agent's second push, so a page opened at once has no chart of it: the chart is
    made when its first points arrive live, drawn in its unit, with no script error (signed_in checks)."""
    node, seq = "late-node-1", itertools.count(1)
    headers = {"Authorization": f"Bearer {server.create_agent_token(node)}"}

    def push(metrics: dict[str, float], device: int | None) -> None:
        now = time.time()
        body = {
            "node_id": node,
            "samples": [{"seq": next(seq), "ts": now, "device": device, "pool": None, "metrics": metrics}],
            "inventory": {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 80 << 30}]},
        }
        httpx.post(f"{server.url}/api/v1/ingest", json=body, headers=headers, timeout=10).raise_for_status()

    push({"gpu_temperature_celsius": 40.0}, 0)
    page.goto(f"/nodes/{node}")
    _chart(page, "gpu_temperature_celsius").wait_for()
    assert _chart(page, "network_latency_seconds").count() == 0
    rtt = _chart(page, "network_latency_seconds")
    for _ in range(20):
        push({"network_latency_seconds": 0.012}, None)
        if rtt.count():
            break
        time.sleep(0.5)
    wait_for(lambda: int(rtt.get_attribute("data-points") or 0) >= 1, page)
    ticks = _ticks(page, "network_latency_seconds")
    assert len(ticks) >= 2 and all(t.endswith(" ms") for t in ticks), ticks


def test_longer_ranges_are_rollups_and_say_so(page: Any) -> None:
    page.goto(f"/nodes/{NODE}")
    page.click('nav.ranges a:has-text("6 h")')
    page.wait_for_url("**?range=6h")
    assert "1-minute means" in page.locator(".charts-head h2").inner_text()
    assert page.locator('nav.ranges a[aria-current="true"]').inner_text() == "6 h"
    # a fresh node has no rolled-up minute yet: the page says so instead of drawing empty axes
    assert "No rolled-up minutes in the last 6 h yet" in page.locator("#charts-empty").inner_text()


def test_the_pool_page_shares_one_range_and_names_its_unit(page: Any, screenshots: Path) -> None:
    page.goto("/pools/chat")
    demand, replicas = _chart(page, "demand"), _chart(page, "replicas")
    demand.wait_for()
    wait_for(lambda: demand.get_attribute("data-x-span") is not None, page)
    assert demand.get_attribute("data-x-span") == replicas.get_attribute("data-x-span") == "1800"  # 15 min + 15 ahead
    assert page.locator('[data-chart="demand"] .u-title').inner_text().startswith("Requests/s")
    assert all(t.endswith(" /s") for t in _ticks(page, "demand"))
    ticks = _ticks(page, "replicas")
    assert len(set(ticks)) == len(ticks) and all(t.isdigit() for t in ticks), ticks  # whole replicas
    wait_for(lambda: int(page.locator("#live-flag").get_attribute("data-events") or 0) >= 2, page)
    page.screenshot(path=str(screenshots / "pool-first-seconds.png"), full_page=True)
