"""The fleet page in headless Chromium against a real server, two nodes pushing through the real ingest: a GPU node
and a CPU node whose agent found no NVML. A new sample changes the CPU node's tile without a reload, and the
critical alert it sets off turns the tile red with its mark; the page is saved under tests/artifacts/screenshots/."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from tests.browser.conftest import signed_in, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]
GIB = 1 << 30
PUSH_EVERY_S = 0.5
NO_NVML = "NVML Shared Library Not Found"


class Pusher:
    """Stands in for two agents: every 0.5 s a batch of each node, the CPU node's queue depth as ``queue`` says."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.tokens = {node: server.create_agent_token(node) for node in ("cpu-1", "gpu-1")}
        self.queue = 2.0
        self.seq = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pusher", daemon=True)

    def _batch(self, node: str, now: float) -> dict[str, Any]:
        self.seq += 1
        if node == "cpu-1":
            metrics = {"request_rate_per_second": 4.0, "queue_depth_requests": self.queue}
            absent = {
                "gpu": NO_NVML,
                "pools": {"chat": {"kv_cache_utilization_ratio": "tgi exposes no KV-cache metric"}},
            }
            return {
                "node_id": node,
                "samples": [{"seq": self.seq, "ts": now, "device": None, "pool": "chat", "metrics": metrics}],
                "report": {"ts": now, "pools": {"chat": {"ready": 1}}, "absent": absent},
            }
        gpu = {"gpu_utilization_ratio": 0.4, "gpu_memory_used_bytes": 20.0 * GIB, "gpu_temperature_celsius": 61.0}
        return {
            "node_id": node,
            "samples": [{"seq": self.seq, "ts": now, "device": 0, "pool": None, "metrics": gpu}],
            "inventory": {"gpus": [{"index": 0, "name": "H100", "memory_total_bytes": 80 * GIB}]},
            "report": {"ts": now, "pools": {}},
        }

    def _run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=5) as client:
            while not self.stop.is_set():
                for node, token in self.tokens.items():
                    body = self._batch(node, time.time())
                    client.post("/api/v1/ingest", json=body, headers={"Authorization": f"Bearer {token}"})
                self.stop.wait(PUSH_EVERY_S)


@dataclass
class Fleet:
    server: ServerProcess
    pusher: Pusher


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet-browser")
    with ServerProcess(f"sqlite:///{tmp}/fleet.db") as server:
        headers = {"Authorization": f"Bearer {server.admin_token}"}
        rule = {
            "name": "QueueDeep",
            "kind": "threshold",
            "metric": "queue_depth_requests",
            "op": ">",
            "threshold": 5,
            "for_seconds": 0,
            "severity": "critical",
        }
        httpx.post(f"{server.url}/api/v1/alert-rules", json=rule, headers=headers, timeout=10).raise_for_status()
        pusher = Pusher(server)
        pusher.thread.start()
        try:
            # the page is drawn with the nodes it finds: the test starts when both have reported
            deadline = time.monotonic() + 30
            while len(httpx.get(f"{server.url}/api/v1/nodes", headers=headers, timeout=10).json()["items"]) < 2:
                assert time.monotonic() < deadline, "the nodes never reported"
                time.sleep(0.2)
            yield Fleet(server, pusher)
        finally:
            pusher.stop.set()
            pusher.thread.join(timeout=5)


def test_the_fleet_page_updates_live_says_why_and_marks_the_alerted_node(
    chromium: Any, fleet: Fleet, screenshots: Path
) -> None:
    with signed_in(chromium, fleet.server.url, fleet.server.admin_token) as page:
        loads: list[str] = []
        page.on("load", lambda _page: loads.append("load"))
        cpu = page.locator('li[data-node="cpu-1"]')
        queue = cpu.locator('[data-metric="queue_depth_requests"]')
        assert queue.inner_text() == "2.00 req"
        assert cpu.locator('[data-field="gpus"]').inner_text() == "no GPU"  # why: once, above the tiles
        assert cpu.locator('[data-why="gpu_utilization_ratio"]').inner_text() == "no GPU"
        assert page.locator("#gpu-absence").inner_text() == f"1 node reports no GPU: {NO_NVML}"
        assert cpu.locator('[title^="gpu_power_watts"] .agg').inner_text().lower() == "sum"
        assert cpu.locator('[data-why="kv_cache_utilization_ratio"]').inner_text() == "tgi exposes no KV-cache metric"
        assert page.locator('li[data-node="gpu-1"] [data-field="gpus"]').inner_text() == "1 GPU"
        assert page.locator('section.pool-group[data-pool="chat"] [data-pool-field="nodes"]').inner_text() == "1"
        assert not cpu.locator('[data-field="mark"]').is_visible()

        fleet.pusher.queue = 9.0
        wait_for(lambda: queue.inner_text() == "9.00 req", page)
        wait_for(lambda: "alert-critical" in (cpu.get_attribute("class") or ""), page)
        mark = cpu.locator('[data-field="mark"]')
        assert mark.is_visible() and mark.inner_text() == "1 firing: QueueDeep"
        assert mark.get_attribute("href") == "/alerts?state=firing&node=cpu-1"
        assert loads == []  # all of it without a reload
        assert int(page.get_attribute("#fleet-live", "data-events") or 0) >= 2
        page.screenshot(path=str(screenshots / "fleet-live.png"), full_page=True)
        mark.click()  # to the alerts it stands for, and only those
        page.wait_for_url("**/alerts?state=firing&node=cpu-1")
        assert page.locator("tr[data-alert]").first.get_attribute("data-alert") == "QueueDeep"
        assert "Alerts of node cpu-1" in page.locator("h1").inner_text()
