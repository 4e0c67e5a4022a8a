"""A Prometheus-only fleet in headless Chromium against a real server, its series sent by remote write as
Prometheus sends them (no agent): a dcgm-exporter node sized by FB_USED + FB_FREE, a vLLM without a pool label
serving a pool named after its model, and what no source reads listed on the Health page. The Fleet, Pools, Health,
Settings and Alerts pages are saved under tests/artifacts/screenshots/ to be looked at."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from tests.browser.conftest import signed_in, wait_for
from tests.support.remote_write import REMOTE_WRITE_HEADERS, Series, named, write_request

pytestmark = [pytest.mark.browser, pytest.mark.slow]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "meta-llama--Llama-3.1-8B-Instruct"


def scrape(ts: float) -> list[Series]:
    """One scrape of a node's dcgm-exporter (two GPUs) and vLLM, relabelled with a `node` only."""
    found: list[Series] = []
    for gpu, util, used in (("0", 87.0, 40960.0), ("1", 12.0, 1024.0)):
        labels = {"gpu": gpu, "UUID": f"GPU-{gpu}", "modelName": "NVIDIA H100 80GB HBM3", "node": "gpu-node-a"}
        found += [
            (named("DCGM_FI_DEV_GPU_UTIL", **labels), [(ts, util)]),
            (named("DCGM_FI_DEV_FB_USED", **labels), [(ts, used)]),
            (named("DCGM_FI_DEV_FB_FREE", **labels), [(ts, 81559.0 - used)]),
            (named("DCGM_FI_DEV_SM_CLOCK", **labels), [(ts, 1980.0)]),
        ]
    vllm = {"model_name": MODEL, "engine": "0", "node": "gpu-node-a"}
    found += [
        (named("vllm:num_requests_waiting", **vllm), [(ts, 3.0)]),
        (named("vllm:generation_tokens_total", **vllm), [(ts, 1000.0 * ts % 1e6)]),
        (named("up", node="gpu-node-a", job="dcgm"), [(ts, 1.0)]),
    ]
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("remote-write-browser")
    with ServerProcess(f"sqlite:///{tmp}/fleet.db") as server:
        token = server.create_token("remote_write")
        headers = {"Authorization": f"Bearer {token}", **REMOTE_WRITE_HEADERS}
        now = time.time()
        for ts in (now - 30, now - 15, now):
            answer = httpx.post(f"{server.url}/api/v1/write", content=write_request(scrape(ts)), headers=headers)
            assert answer.status_code == 204, answer.text
        yield server


def test_a_prometheus_only_fleet_reads_right_on_every_page(
    chromium: Any, server: ServerProcess, screenshots: Path
) -> None:
    with signed_in(chromium, server.url, server.admin_token) as page:
        page.goto("/")
        section = page.locator(f'section.pool-group[data-pool="{POOL}"]')
        wait_for(lambda: section.count() == 1, page)
        head = section.locator("h2.pool-head")
        assert MODEL in head.inner_text() and "not configured" in head.inner_text()
        tile = section.locator('li[data-node="gpu-node-a"]')
        assert "Prometheus remote write" in tile.inner_text()
        assert tile.locator('[data-metric="gpu_utilization_ratio"]').inner_text() == "87 %"
        page.screenshot(path=str(screenshots / "fleet-prometheus-only.png"), full_page=True)

        head.locator("a.note").click()  # not configured: to the pools list, which says how to
        page.wait_for_url("**/pools#unconfigured")
        listed = page.locator(f'#unconfigured li[data-pool="{POOL}"]').inner_text()
        assert "reported by Prometheus remote write" in listed and MODEL in listed
        page.screenshot(path=str(screenshots / "pools-unconfigured.png"), full_page=True)

        page.goto("/health")
        unmapped = page.locator("#unmapped").inner_text()
        assert "DCGM_FI_DEV_SM_CLOCK" in unmapped and "up" in unmapped and "DCGM_FI_DEV_FB_FREE" not in unmapped
        page.screenshot(path=str(screenshots / "health-unmapped.png"), full_page=True)

        page.goto("/settings")  # no webhook yet: said, with no empty table under it
        assert "No webhooks." in page.locator("main").inner_text()
        page.screenshot(path=str(screenshots / "settings-empty-lists.png"), full_page=True)

        page.goto("/alerts?state=resolved")  # none resolved yet: said once, with no empty table under it
        assert page.locator("table.alerts").count() == 0 and "No resolved alerts." in page.locator("main").inner_text()
        page.screenshot(path=str(screenshots / "alerts-none-resolved.png"), full_page=True)
