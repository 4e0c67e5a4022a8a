"""The README's Prometheus path end to end (issue 39): a real Prometheus scrapes a dcgm-exporter and a vLLM that serves
traffic (fixtures whose counters move as requests finish), and remote-writes to a real server. The vLLM's pool shows
up as served but not configured, is adopted in one action as a dry-run pool, learns its per-replica capacity from
what it served, and the autoscaler records its first dry-run decision, with nothing configured by hand but the
Prometheus config and the adoption. Shortened: Prometheus scrapes every 2 s and the server rolls up and forecasts
every 5 s (the README's defaults: 15 s, 60 s and 60 s, about ten minutes end to end)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import ServerProcess
from tests.support.fixture_exporter import (
    VLLM_REQUEST_LATENCY_BUCKETS_S,
    DcgmGpu,
    FixtureExporter,
    VllmEngine,
    render_dcgm,
    render_vllm,
)
from tests.support.prometheus import PrometheusProcess, RemoteWrite, require_program
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

NODE = "gpu-node-a"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "meta-llama--Llama-3.1-8B-Instruct"
RATE = 4.0  # requests a second the engine finishes, each within 0.5 s
SHORTENED = {
    "FLEETPILOT_ROLLUP_INTERVAL_SECONDS": "5",
    "FLEETPILOT_FORECAST_INTERVAL_SECONDS": "5",
}


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerProcess]:
    require_program("prometheus")
    for name, value in SHORTENED.items():
        monkeypatch.setenv(name, value)
    with ServerProcess(f"sqlite:///{tmp_path / 'fleetpilot.db'}", log_path=tmp_path / "server.log") as server:
        yield server


class Traffic:
    """The vLLM fixture's counters moved every half second as ``RATE`` requests a second finish under 0.5 s."""

    def __init__(self, exporter: FixtureExporter) -> None:
        self.exporter = exporter
        self.engine = VllmEngine(model_name=MODEL, num_requests_running=3, num_requests_waiting=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        finished = 0.0
        while not self._stop.wait(0.5):
            finished += RATE * 0.5
            done = int(finished)
            engine = self.engine
            under = tuple(0 if bound < 0.5 else done for bound in VLLM_REQUEST_LATENCY_BUCKETS_S)
            self.engine = replace(
                engine,
                generation_tokens_total=done * 100,
                request_success_total={"stop": done, "length": 0, "abort": 0},
                e2e_latency_buckets=under,
                e2e_latency_count=done,
                e2e_latency_sum_s=0.3 * done,
            )
            self.exporter.serve(render_vllm([self.engine]))


def test_from_the_first_scrape_to_the_first_dry_run_decision(server: ServerProcess, tmp_path: Path) -> None:
    started = time.monotonic()
    token = server.create_token("remote_write")
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    gpus = (DcgmGpu(0, "GPU-604ac76c", gpu_util_percent=70, fb_used_mib=40960, fb_free_mib=40448),)
    with (
        FixtureExporter(render_dcgm(gpus)) as dcgm,
        FixtureExporter(render_vllm([VllmEngine(model_name=MODEL)])) as vllm,
        Traffic(vllm),
        PrometheusProcess(
            workdir=tmp_path / "prometheus",
            target=[dcgm.target, vllm.target],
            remote_write=RemoteWrite(f"{server.url}/api/v1/write", token),
            target_labels={"node": NODE},
            scrape_interval_s=2.0,
        ),
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        _sign_in(client, server.admin_token)
        listing = wait_for(lambda: _unconfigured(client), timeout_s=60.0)
        seen_s = time.monotonic() - started
        adopted = client.post(
            f"/pools/{POOL}/adopt",
            data={"csrf_token": _csrf(listing), "slo_p99_seconds": "1.0"},
            follow_redirects=False,
        )
        assert adopted.status_code == 303, adopted.text
        try:
            pool = wait_for(lambda: _decided(client, admin), timeout_s=240.0)
        except AssertionError:
            forecast = client.get(f"/api/v1/pools/{POOL}/forecast", headers=admin).json()
            pool = client.get(f"/api/v1/pools/{POOL}", headers=admin).json()
            events = client.get(f"/api/v1/scaling-events?pool={POOL}", headers=admin).json()
            node = client.get(f"/api/v1/nodes/{NODE}", headers=admin).json()
            raise AssertionError(
                f"no dry-run decision; the pool: {pool}, its events: {events}, the forecast's saturation: "
                f"{forecast.get('saturation')}, the node: {node}"
            ) from None
        decided_s = time.monotonic() - started
    assert pool["mode"] == "dry_run" and pool["desired_replicas"] >= 1
    forecast = client_get(server, f"/api/v1/pools/{POOL}/forecast", admin)
    assert forecast["saturation"]["capacity_source"] in ("measured", "lower_bound")
    events = client_get(server, f"/api/v1/scaling-events?pool={POOL}", admin)["items"]
    assert events and all(e["outcome"] == "dry_run" for e in events)
    assert all(e["from_replicas"] >= 1 for e in events)  # the engine was serving from the first scrape on
    print(f"pool seen {seen_s:.0f} s after the start, first dry-run decision {decided_s:.0f} s after it")


def client_get(server: ServerProcess, path: str, headers: dict[str, str]) -> Any:
    return httpx.get(f"{server.url}{path}", headers=headers, timeout=10.0).json()


def _sign_in(client: httpx.Client, token: str) -> None:
    page = client.get("/login")
    signed = client.post("/login", data={"token": token, "csrf_token": _csrf(page.text)}, follow_redirects=False)
    assert signed.status_code == 303, signed.text


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found[1]


def _unconfigured(client: httpx.Client) -> str | None:
    page = client.get("/pools").text
    return page if f'action="/pools/{POOL}/adopt"' in page else None


def _decided(client: httpx.Client, admin: dict[str, str]) -> dict[str, Any] | None:
    """The pool once the autoscaler has recorded a dry-run decision sized by a per-replica capacity."""
    events = client.get(f"/api/v1/scaling-events?pool={POOL}", headers=admin).json().get("items", [])
    if not any(e["outcome"] == "dry_run" and "no per-replica capacity" not in e["reason"] for e in events):
        return None
    pool: dict[str, Any] = client.get(f"/api/v1/pools/{POOL}", headers=admin).json()
    return pool
