"""Issue 35, remote write and OTLP: what a remote_write token sends is counted before it is decoded, bounded as an
agent's samples are, and refused with a message naming the bound. Each test replays the attack and failed before
the fix."""

from __future__ import annotations

import math
import re
import tracemalloc
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace

import cramjam
import pytest
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from sqlalchemy import Engine, func, insert, select

from collector.database import make_engine
from collector.remote.mapping import load_mapping
from collector.remote.receiver import RemoteWriter
from collector.remote.tables import remote_points, remote_series
from collector.tables import NO_POOL, nodes, samples, series_latest
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from tests.support.clock import FakeClock
from tests.support.remote_write import REMOTE_WRITE_HEADERS, Writer, named, write_request, writer_for
from web.services import AppServices
from wire.catalog import METRIC_NAMES
from wire.control import NAME_PATTERN

Auth = Callable[..., dict[str, str]]
T0 = FakeClock().now - 60
GPU = {"gpu": "0", "Hostname": "gpu-1", "job": "dcgm"}
VLLM = {"model_name": "llama-8b", "engine": "0", "instance": "10.0.0.1:8000", "node": "gpu-1", "job": "vllm"}


@pytest.fixture
def writer(client: TestClient, auth: Auth) -> Writer:
    return writer_for(client, auth("remote_write"))


def count(engine: Engine, table: object) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(table)) or 0)  # type: ignore[arg-type]


def limited(services: AppServices, engine: Engine, **limits: int) -> None:
    """The receiver with some of its limits lowered (a test's fleet is small)."""
    services.remote = RemoteWriter(engine, load_mapping(), limits=replace(services.remote.limits, **limits))


def one_label_series(n: int) -> bytes:
    """A WriteRequest of ``n`` series of one label each (``__name__``), built on the wire: ~16 bytes a series."""
    parts = []
    for i in range(n):
        value = b"m%d" % (i % 1000)
        label = b"\x0a\x08__name__\x12" + bytes([len(value)]) + value
        series = b"\x0a" + bytes([len(label)]) + label
        parts.append(b"\x0a" + bytes([len(series)]) + series)
    return b"".join(parts)


def test_a_million_series_body_is_refused_before_it_is_decoded(
    client: TestClient, auth: Auth, services: AppServices
) -> None:
    raw = one_label_series(960_000)
    body = bytes(cramjam.snappy.compress_raw(raw))
    assert len(body) < 2_500_000 and len(raw) < 4 * services.settings.ingest_max_body_bytes
    headers = {**auth("remote_write"), **REMOTE_WRITE_HEADERS}
    tracemalloc.start()
    try:
        answer = client.post("/api/v1/write", content=body, headers=headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status_code == 413, answer.text
    message = answer.json()["error"]["message"]
    assert "50000 series" in message and "remote_write_max_series_per_request" in message
    # the body and its inflated bytes, a few copies of them, never a Python object per series (that was ~750 MB)
    assert peak < 4 * len(raw) + 16 * 2**20, peak


def test_too_many_samples_are_refused_naming_the_bound(writer: Writer, services: AppServices, engine: Engine) -> None:
    limited(services, engine, max_samples_per_request=100)
    status, text = writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0 + i, 60.0) for i in range(101)])])
    assert status == 413 and "remote_write_max_samples_per_request" in text and "100" in text
    assert count(engine, remote_points) == 0


def otlp_histogram(buckets: int, attributes: int) -> bytes:
    """One cumulative histogram point of ``buckets`` bounds and ``attributes`` attributes (the 600 KB attack)."""
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    resource.resource.attributes.add(key="host.name", value={"string_value": "gpu-1"})
    metric = resource.scope_metrics.add().metrics.add(name="vllm:e2e_request_latency_seconds")
    metric.histogram.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    point = metric.histogram.data_points.add(time_unix_nano=int(T0 * 1e9), count=buckets)
    point.explicit_bounds.extend(float(b) for b in range(buckets))
    point.bucket_counts.extend([1] * (buckets + 1))
    for a in range(attributes):
        point.attributes.add(key=f"a{a}", value={"string_value": "v"})
    body: bytes = request.SerializeToString()
    return body


def test_an_otlp_histogram_of_many_buckets_is_refused_before_it_is_converted(client: TestClient, auth: Auth) -> None:
    body = otlp_histogram(37_000, 60)
    headers = {**auth("remote_write"), "Content-Type": "application/x-protobuf"}
    tracemalloc.start()
    try:
        answer = client.post("/api/v1/otlp/v1/metrics", content=body, headers=headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status_code == 413, answer.text
    assert "remote_write_max_labels_per_request" in answer.json()["error"]["message"]
    assert peak < 4 * len(body) + 16 * 2**20, peak  # it was ~480 MB


def test_decodes_past_the_concurrency_bound_are_503_with_retry_after(
    writer: Writer, services: AppServices, engine: Engine, client: TestClient, auth: Auth
) -> None:
    slots = services.remote_decodes
    body = write_request([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 60.0)])])
    with ExitStack() as held:
        for _ in range(services.settings.remote_write_max_concurrent_decodes):
            held.enter_context(slots.slot())
        answer = client.post("/api/v1/write", content=body, headers={**auth("remote_write"), **REMOTE_WRITE_HEADERS})
    assert answer.status_code == 503 and "remote_write_max_concurrent_decodes" in answer.text
    assert 2 <= int(answer.headers["Retry-After"]) <= 6
    assert count(engine, remote_points) == 0
    assert writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 60.0)])])[0] == 204  # the slots are back


def test_a_power_reading_past_the_agent_bound_is_refused_and_the_node_list_answers(
    writer: Writer, client: TestClient, auth: Auth, engine: Engine
) -> None:
    series = [(named("DCGM_FI_DEV_POWER_USAGE", **(GPU | {"gpu": g})), [(T0, 1.7e308)]) for g in ("0", "1")]
    status, text = writer([*series, (named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 60.0)])])
    assert status == 400 and "2 out_of_range" in text and "9.2e+18" in text, text
    with engine.connect() as conn:
        assert conn.execute(select(samples.c.gpu_power_watts, samples.c.gpu_temperature_celsius)).all() == [
            (None, 60.0)
        ]
    assert client.get("/api/v1/nodes", headers=auth("viewer")).status_code == 200


def test_a_derived_ratio_outside_0_1_is_refused_as_the_agent_would_be(writer: Writer, engine: Engine) -> None:
    status, text = writer([(named("DCGM_FI_DEV_GPU_UTIL", **GPU), [(T0, 150.0)])])  # 150 % → 1.5
    assert status == 400 and "gpu_utilization_ratio" in text and "1.5" in text, text
    assert count(engine, samples) == 0


def test_values_stored_before_the_bound_cannot_break_the_node_list(
    client: TestClient, auth: Auth, engine: Engine, services: AppServices
) -> None:
    """Two GPUs at 1.7e308 W, as a server before the bound stored them: every node view summed them into an
    OverflowError (500 for every viewer)."""
    now = services.clock()
    with engine.begin() as conn:
        conn.execute(insert(nodes), [{"id": "gpu-1", "first_seen": now, "last_seen": now, "source": "remote_write"}])
        conn.execute(
            insert(series_latest),
            [
                {"node_id": "gpu-1", "device": d, "pool": NO_POOL, "ts": now, "gpu_power_watts": 1.7e308}
                | {m: None for m in METRIC_NAMES if m != "gpu_power_watts"}
                for d in (0, 1)
            ],
        )
    viewer = auth("viewer")
    listed = client.get("/api/v1/nodes", headers=viewer)
    assert listed.status_code == 200, listed.text
    one = client.get("/api/v1/nodes/gpu-1", headers=viewer)
    assert one.status_code == 200
    assert math.isfinite(one.json()["latest"]["gpu_power_watts"])


@pytest.mark.parametrize("name", ["<img src=x onerror=alert(1)>", "../../settings", "a/b", "gpu-1\ngpu-2", "-x"])
def test_a_node_name_outside_ingests_pattern_is_refused(writer: Writer, engine: Engine, name: str) -> None:
    status, text = writer([(named("DCGM_FI_DEV_GPU_TEMP", **(GPU | {"Hostname": name})), [(T0, 60.0)])])
    assert status == 400 and "1 bad_name" in text and "node name" in text, text
    assert count(engine, nodes) == 0 and count(engine, remote_series) == 0


def test_a_pool_name_outside_ingests_pattern_is_refused(writer: Writer, engine: Engine) -> None:
    status, text = writer([(named("vllm:num_requests_waiting", **(VLLM | {"pool": "a/b"})), [(T0, 3.0)])])
    assert status == 400 and "pool name" in text, text
    assert count(engine, samples) == 0


def test_a_model_id_no_pool_name_holds_names_its_pool_as_a_pool_name_may_be(writer: Writer, engine: Engine) -> None:
    """Without a pool label the pool is named after the model (collector.remote.pool_names): ``<img>`` in a
    model_name reaches no page as a pool name."""
    status, text = writer([(named("vllm:num_requests_waiting", **(VLLM | {"model_name": "<img src=x>"})), [(T0, 3.0)])])
    assert status == 204, text
    with engine.connect() as conn:
        pools = set(conn.scalars(select(samples.c.pool)))
    assert len(pools) == 1 and re.fullmatch(NAME_PATTERN, pools.pop())


def test_nodes_past_the_per_token_bound_are_refused_naming_it(
    writer: Writer, services: AppServices, engine: Engine
) -> None:
    limited(services, engine, max_nodes_per_token=3)
    status, text = writer(
        [(named("DCGM_FI_DEV_GPU_TEMP", **(GPU | {"Hostname": f"n-{i}"})), [(T0, 60.0)]) for i in range(5)]
    )
    assert status == 400 and "2 node_limit" in text and "remote_write_max_nodes_per_token" in text, text
    assert count(engine, nodes) == 3
    assert writer([(named("DCGM_FI_DEV_GPU_TEMP", **(GPU | {"Hostname": "n-0"})), [(T0 + 15, 61.0)])])[0] == 204


def test_a_label_value_past_the_label_bytes_bound_is_refused(writer: Writer, engine: Engine) -> None:
    labels = GPU | {"comment": "x" * 2**20}
    status, text = writer([(named("DCGM_FI_DEV_GPU_TEMP", **labels), [(T0, 60.0)])])
    assert status == 400 and "remote_write_max_label_bytes" in text and "comment" in text, text
    assert count(engine, remote_series) == 0


def test_a_driver_version_past_its_column_is_refused_naming_the_label(writer: Writer, engine: Engine) -> None:
    """dcgm-exporter's DCGM_FI_DRIVER_VERSION label lands in devices.driver_version (64 characters): PostgreSQL
    refused the insert with a 500, which Prometheus retries forever."""
    labels = GPU | {"DCGM_FI_DRIVER_VERSION": "5" * 65}
    status, text = writer([(named("DCGM_FI_DEV_GPU_TEMP", **labels), [(T0, 60.0)])])
    assert status == 400 and "DCGM_FI_DRIVER_VERSION" in text and "64" in text, text
    assert count(engine, samples) == 0


def test_the_remote_write_bounds_are_settings_with_documented_defaults() -> None:
    settings = ServerSettings()
    assert settings.remote_write_max_nodes_per_token == 1000
    assert settings.remote_write_max_label_bytes == 2048
    assert settings.remote_write_max_samples_per_request == 500_000
    assert settings.remote_write_max_labels_per_request == 500_000
    assert settings.remote_write_max_concurrent_decodes == 4
    limits = build_services(ServerSettings(remote_write_max_nodes_per_token=7), make_engine("sqlite://")).remote.limits
    assert limits.max_nodes_per_token == 7
