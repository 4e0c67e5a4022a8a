"""The OpenTelemetry Python SDK exporting OTLP/HTTP to a real ``fleetpilot server``: the SDK lowercases instrument
names (``DCGM_FI_DEV_GPU_UTIL`` leaves it as ``dcgm_fi_dev_gpu_util``), which the mapping still reads; what no source
reads is listed, not silently dropped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from fleetpilot.launch import ServerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
NODE = "gpu-node-9"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(f"sqlite:///{tmp_path / 'fleetpilot.db'}", log_path=tmp_path / "server.log") as server:
        yield server


def test_the_sdks_lowercased_dcgm_gauge_is_mapped_and_an_unknown_one_listed(server: ServerProcess) -> None:
    token = server.create_token("remote_write")
    exporter = OTLPMetricExporter(
        endpoint=f"{server.url}/api/v1/otlp/v1/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)  # exported by force_flush
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"host.name": NODE}))
    meter = provider.get_meter("gpu-sampler")
    meter.create_gauge("DCGM_FI_DEV_GPU_UTIL", unit="").set(42, {"gpu": "0"})
    meter.create_gauge("app_queue_length").set(3)
    try:
        assert provider.force_flush(timeout_millis=10_000)
    finally:
        provider.shutdown()
    headers = {"Authorization": f"Bearer {server.admin_token}"}

    node: dict[str, Any] = wait_for(lambda: _node(server, headers), timeout_s=10.0)
    assert node["source"] == "otlp"
    assert node["latest"]["gpu_utilization_ratio"] == pytest.approx(0.42)
    listed = httpx.get(f"{server.url}/api/v1/unmapped-families?source=otlp", headers=headers, timeout=5.0).json()
    assert [(i["name"], i["samples"]) for i in listed["items"]] == [("app_queue_length", 1)]


def _node(server: ServerProcess, headers: dict[str, str]) -> dict[str, Any] | None:
    answer = httpx.get(f"{server.url}/api/v1/nodes/{NODE}", headers=headers, timeout=5.0)
    found: dict[str, Any] | None = answer.json() if answer.status_code == 200 else None
    return found
