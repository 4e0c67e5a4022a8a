"""POST /api/v1/write (Prometheus remote write 1.0) and /api/v1/otlp/v1/metrics, in process on both databases:
what is stored from what, a resend or a split scrape, what is refused and how it is said."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import cramjam
import pytest
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from sqlalchemy import Engine, func, select

from collector.remote.mapping import parse_mapping
from collector.remote.prompb.write_v2_pb2 import Request as WriteRequestV2
from collector.remote.receiver import RemoteWriter
from collector.remote.tables import remote_points, remote_series
from collector.remote.write_request_v2 import CONTENT_TYPE as WRITE_V2_CONTENT_TYPE
from collector.tables import samples
from tests.conftest import gpu_sample
from tests.support.clock import FakeClock
from tests.support.remote_write import REMOTE_WRITE_HEADERS, Series, Writer, named, write_request, writer_for
from web.services import AppServices

Auth = Callable[..., dict[str, str]]
T0 = FakeClock().now - 60
GPU = {"gpu": "0", "Hostname": "gpu-1", "UUID": "GPU-5fd4", "modelName": "NVIDIA H100 80GB HBM3", "job": "dcgm"}
VLLM = {"model_name": "llama-8b", "engine": "0", "instance": "10.0.0.1:8000", "node": "gpu-1", "job": "vllm"}
BOUNDS = ("0.5", "1.0", "2.5", "+Inf")


@pytest.fixture
def writer(client: TestClient, auth: Auth) -> Writer:
    return writer_for(client, auth("remote_write"))


def stored(engine: Engine, *columns: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        query = select(*(samples.c[c] for c in ("ts", "device", "pool", *columns)))
        return [tuple(r) for r in conn.execute(query.order_by(samples.c.ts, samples.c.device, samples.c.pool))]


def histogram(counts: Sequence[float], ts: float) -> list[Series]:
    name = "vllm:e2e_request_latency_seconds"
    buckets: list[Series] = [
        (named(f"{name}_bucket", le=le, **VLLM), [(ts, c)]) for le, c in zip(BOUNDS, counts, strict=True)
    ]
    return [*buckets, (named(f"{name}_count", **VLLM), [(ts, counts[-1])])]


def test_dcgm_gauges_become_the_gpu_metrics_in_catalog_units(
    writer: Writer, engine: Engine, client: TestClient, auth: Auth
) -> None:
    status, text = writer(
        [
            (named("DCGM_FI_DEV_GPU_UTIL", **GPU), [(T0, 83.0), (T0 + 15, 90.0)]),
            (named("DCGM_FI_DEV_FB_USED", **GPU), [(T0, 40960.0), (T0 + 15, 41000.0)]),
            (named("DCGM_FI_DEV_POWER_USAGE", **GPU), [(T0, 612.5), (T0 + 15, 640.0)]),
        ]
    )
    assert (status, text) == (204, "")
    rows = stored(engine, "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts")
    assert rows == [
        (T0, 0, "", pytest.approx(0.83), 40960 * 2**20, 612.5),
        (T0 + 15, 0, "", pytest.approx(0.90), 41000 * 2**20, 640.0),
    ]
    node = client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()
    assert node["source"] == "remote_write" and node["resolution_seconds"] == 15.0
    assert node["gpus"][0] | {"memory_total_bytes": None} == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-5fd4",
        "memory_total_bytes": None,
        "driver_version": None,
    }
    assert node["series"][0]["extra"] == {"source": "remote_write", "resolution_seconds": 15.0}


def test_a_resent_request_stores_nothing_twice(writer: Writer, engine: Engine, services: AppServices) -> None:
    series = [(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 61.0), (T0 + 15, 62.0)])]
    assert writer(series)[0] == 204
    before = stored(engine, "gpu_temperature_celsius")
    assert writer(series)[0] == 204  # a WAL replay after a restart of Prometheus sends it again
    assert stored(engine, "gpu_temperature_celsius") == before
    assert len(before) == 2
    points = services.remote_telemetry.points
    assert points.labels("remote_write", "stored")._value.get() == 2
    assert points.labels("remote_write", "duplicate")._value.get() == 2


def test_vllm_counters_and_histogram_become_rates_and_a_p99(writer: Writer, engine: Engine) -> None:
    tokens = named("vllm:generation_tokens_total", **VLLM)
    writer(
        [
            *histogram([0, 0, 0, 0], T0),
            (tokens, [(T0, 1000.0)]),
            (named("vllm:num_requests_waiting", **VLLM), [(T0, 3.0)]),
        ]
    )
    writer([*histogram([36, 42, 42, 42], T0 + 15), (tokens, [(T0 + 15, 7000.0)])])
    rows = stored(
        engine,
        "request_rate_per_second",
        "token_throughput_per_second",
        "request_latency_p99_seconds",
        "queue_depth_requests",
    )
    assert rows == [
        (T0, -1, "llama-8b", None, None, None, 3.0),  # the first scrape: a gauge, but no rate yet
        (T0 + 15, -1, "llama-8b", pytest.approx(42 / 15), pytest.approx(400.0), pytest.approx(0.965), None),
    ]


def test_a_scrape_split_over_requests_converges_to_the_whole(writer: Writer, engine: Engine) -> None:
    """Prometheus shards series over parallel requests: a histogram's buckets arrive apart, in any order."""
    writer(histogram([0, 0, 0, 0], T0))
    whole = histogram([36, 42, 42, 42], T0 + 15)
    writer(whole[2:])  # +Inf and _count first: alone, every observation lies in the last finite bound
    partial = stored(engine, "request_latency_p99_seconds")[-1][-1]
    writer(whole[:2])
    assert partial != pytest.approx(0.965)
    assert stored(engine, "request_latency_p99_seconds")[-1] == (T0 + 15, -1, "llama-8b", pytest.approx(0.965))
    with engine.connect() as conn:  # one sample for that scrape, rewritten, not one per request
        assert conn.scalar(select(func.count()).select_from(samples).where(samples.c.ts == T0 + 15)) == 1


def test_a_late_point_derives_the_later_scrape_again(writer: Writer, engine: Engine) -> None:
    tokens = named("vllm:generation_tokens_total", **VLLM)
    writer([(tokens, [(T0, 1000.0), (T0 + 30, 4000.0)])])  # T0 + 15 is late (another shard, a retry)
    assert stored(engine, "token_throughput_per_second")[-1][-1] == pytest.approx(100.0)
    writer([(tokens, [(T0 + 15, 2500.0)])])
    assert [r[-1] for r in stored(engine, "token_throughput_per_second")] == [pytest.approx(100.0)] * 2


def test_unmapped_series_are_counted_and_never_stored(writer: Writer, engine: Engine, services: AppServices) -> None:
    assert writer([(named("go_goroutines", job="dcgm", instance="a:9400"), [(T0, 12.0), (T0 + 15, 13.0)])])[0] == 204
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(remote_series)) == 0
        assert conn.scalar(select(func.count()).select_from(remote_points)) == 0
        assert conn.scalar(select(func.count()).select_from(samples)) == 0
    assert services.remote_telemetry.points.labels("remote_write", "unmapped")._value.get() == 2


def test_another_value_for_a_stored_time_is_refused_and_the_rest_kept(writer: Writer, engine: Engine) -> None:
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 61.0)])])
    status, text = writer(
        [(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 70.0)]), (named("DCGM_FI_DEV_GPU_UTIL", **GPU), [(T0, 50.0)])]
    )
    assert status == 400 and "1 points refused (1 conflict)" in text and "1 new points stored" in text
    assert stored(engine, "gpu_temperature_celsius", "gpu_utilization_ratio") == [(T0, 0, "", 61.0, 0.5)]


def test_a_point_older_than_the_window_is_refused(writer: Writer, services: AppServices) -> None:
    old = services.clock() - services.remote.limits.window_seconds - 1
    status, text = writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(old, 61.0)])])
    assert status == 400 and "1 too_old" in text


def test_a_source_past_its_series_limit_drops_new_series(writer: Writer, services: AppServices, engine: Engine) -> None:
    mapping = parse_mapping(
        "sources:\n- {name: dcgm, node: [Hostname], device: gpu, max_series: 2,"
        " metrics: {gpu_temperature_celsius: {gauge: DCGM_FI_DEV_GPU_TEMP}}}"
    )
    services.remote = RemoteWriter(engine, mapping)
    limited = services.remote_telemetry.points.labels("remote_write", "series_limit")
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **(GPU | {"gpu": str(i)})), [(T0, 60.0)]) for i in range(3)])
    assert limited._value.get() == 1
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **(GPU | {"gpu": str(i)})), [(T0 + 15, 60.0)]) for i in range(2)])
    assert limited._value.get() == 1  # the two it holds go on
    assert {r[1] for r in stored(engine)} == {0, 1}


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b"not snappy", REMOTE_WRITE_HEADERS, 400, "not snappy-compressed"),
        (
            bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")),
            REMOTE_WRITE_HEADERS,
            400,
            "not a protobuf",
        ),
        (b"", {**REMOTE_WRITE_HEADERS, "Content-Encoding": "gzip"}, 415, "send snappy"),
    ],
)
def test_a_bad_body_is_400_naming_the_fault(
    client: TestClient, auth: Auth, body: bytes, headers: dict[str, str], status: int, says: str
) -> None:
    answer = client.post("/api/v1/write", content=body, headers={**auth("remote_write"), **headers})
    assert answer.status_code == status and says in answer.json()["error"]["message"]


def test_a_series_without_a_name_is_400(writer: Writer) -> None:
    status, text = writer([({"job": "x"}, [(T0, 1.0)])])
    assert status == 400 and "timeseries[0]: no __name__ label" in text


def test_an_agent_token_may_not_remote_write(client: TestClient, auth: Auth) -> None:
    answer = client.post(
        "/api/v1/write", content=write_request([]), headers={**auth("agent", node_id="n"), **REMOTE_WRITE_HEADERS}
    )
    assert answer.status_code == 403


def test_overload_is_503_with_retry_after(
    writer: Writer, services: AppServices, client: TestClient, auth: Auth
) -> None:
    services.ingest_gate.enter = _shed  # type: ignore[method-assign]
    answer = client.post(
        "/api/v1/write", content=write_request([]), headers={**auth("remote_write"), **REMOTE_WRITE_HEADERS}
    )
    assert answer.status_code == 503 and 2 <= int(answer.headers["Retry-After"]) <= 6


def _shed() -> float:
    from web.ingest_gate import Shed

    raise Shed("8 batches in progress")


def test_a_scraped_node_stays_up_for_three_of_its_intervals(
    writer: Writer, client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 61.0), (T0 + 15, 62.0)])])
    clock.advance(40)  # an agent's node would be down after 3 s; a 15 s scrape misses one or two
    assert client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()["status"] == "up"
    assert [n["id"] for n in client.get("/api/v1/nodes?status=up", headers=auth("viewer")).json()["items"]] == ["gpu-1"]
    clock.advance(10)
    assert client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()["status"] == "down"


def test_a_node_seen_in_one_scrape_counts_as_scraped_every_minute_until_its_second(
    writer: Writer, client: TestClient, auth: Auth, clock: FakeClock
) -> None:
    """One scrape tells no interval: Prometheus' default (1 m) holds the node up, and its pools with it, until the
    second scrape measures its own."""
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 61.0)])])
    clock.advance(150)
    node = client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()
    assert node["status"] == "up" and node["resolution_seconds"] == 60.0
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0 + 15, 62.0)])])
    assert client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()["resolution_seconds"] == 15.0
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0 + 15, 62.0)])])  # a resend measures nothing: kept
    assert client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()["resolution_seconds"] == 15.0


def otlp_gauge(name: str, value: float, ts: float, **attributes: str) -> bytes:
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    resource.resource.attributes.add(key="service.name", value={"string_value": "dcgm"})
    metric = resource.scope_metrics.add().metrics.add(name=name)
    point = metric.gauge.data_points.add(as_double=value, time_unix_nano=int(ts * 1e9))
    for key, text in attributes.items():
        point.attributes.add(key=key, value={"string_value": text})
    body: bytes = request.SerializeToString()
    return body


def test_otlp_metrics_take_the_same_mapping(client: TestClient, auth: Auth, engine: Engine) -> None:
    body = otlp_gauge("DCGM_FI_DEV_GPU_UTIL", 42.0, T0, gpu="1", Hostname="gpu-2")
    answer = client.post(
        "/api/v1/otlp/v1/metrics",
        content=body,
        headers={**auth("remote_write"), "Content-Type": "application/x-protobuf"},
    )
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-protobuf"
    assert not ExportMetricsServiceResponse.FromString(answer.content).HasField("partial_success")
    assert stored(engine, "gpu_utilization_ratio") == [(T0, 1, "", pytest.approx(0.42))]
    node = client.get("/api/v1/nodes/gpu-2", headers=auth("viewer")).json()
    assert node["source"] == "otlp"


def test_otlp_reports_dropped_points_as_partial_success(client: TestClient, auth: Auth) -> None:
    body = otlp_gauge("DCGM_FI_DEV_GPU_UTIL", 42.0, T0, gpu="1")  # no node label of any kind
    answer = client.post(
        "/api/v1/otlp/v1/metrics",
        content=body,
        headers={**auth("remote_write"), "Content-Type": "application/x-protobuf"},
    )
    partial = ExportMetricsServiceResponse.FromString(answer.content).partial_success
    assert answer.status_code == 200 and partial.rejected_data_points == 1 and "no_node" in partial.error_message


@pytest.mark.parametrize(("content_type", "status"), [("application/json", 415), ("application/x-protobuf", 400)])
def test_otlp_refuses_json_and_garbage(client: TestClient, auth: Auth, content_type: str, status: int) -> None:
    answer = client.post(
        "/api/v1/otlp/v1/metrics",
        content=b'{"resourceMetrics": []}',
        headers={**auth("remote_write"), "Content-Type": content_type},
    )
    assert answer.status_code == status


def otlp_dynamo_requests(total: float, ts: float) -> bytes:
    """NVIDIA Dynamo's frontend request counter as an OpenTelemetry Collector forwards it (a cumulative sum)."""
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    for key, text in (("service.name", "dynamo-frontend"), ("k8s.node.name", "gpu-3")):
        resource.resource.attributes.add(key=key, value={"string_value": text})
    metric = resource.scope_metrics.add().metrics.add(name="dynamo_frontend_requests_total")
    metric.sum.is_monotonic = True
    metric.sum.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    point = metric.sum.data_points.add(as_double=total, time_unix_nano=int(ts * 1e9))
    point.attributes.add(key="model", value={"string_value": "qwen3-32b"})
    body: bytes = request.SerializeToString()
    return body


def test_otlp_counters_become_rates_across_exports(client: TestClient, auth: Auth, engine: Engine) -> None:
    headers = {**auth("remote_write"), "Content-Type": "application/x-protobuf"}
    for total, ts in ((100.0, T0), (250.0, T0 + 15)):
        assert client.post(
            "/api/v1/otlp/v1/metrics", content=otlp_dynamo_requests(total, ts), headers=headers
        ).is_success
    assert stored(engine, "request_rate_per_second") == [(T0 + 15, -1, "qwen3-32b", pytest.approx(10.0))]


def test_remote_write_2_0_is_taken_by_its_content_type_and_says_what_it_wrote(
    client: TestClient, auth: Auth, engine: Engine
) -> None:
    request = WriteRequestV2(symbols=["", "__name__", "DCGM_FI_DEV_GPU_TEMP", "gpu", "0", "Hostname", "gpu-1"])
    series = request.timeseries.add(labels_refs=[1, 2, 3, 4, 5, 6])
    series.samples.add(value=64.0, timestamp=round(T0 * 1000))
    body = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    headers = {**auth("remote_write"), **REMOTE_WRITE_HEADERS, "Content-Type": WRITE_V2_CONTENT_TYPE}
    answer = client.post("/api/v1/write", content=body, headers=headers)
    assert answer.status_code == 204
    assert answer.headers["X-Prometheus-Remote-Write-Samples-Written"] == "1"
    assert answer.headers["X-Prometheus-Remote-Write-Histograms-Written"] == "0"
    assert stored(engine, "gpu_temperature_celsius") == [(T0, 0, "", 64.0)]
    again = client.post("/api/v1/write", content=body, headers=headers)  # a resend: written, as a duplicate
    assert again.headers["X-Prometheus-Remote-Write-Samples-Written"] == "1"
    assert stored(engine, "gpu_temperature_celsius") == [(T0, 0, "", 64.0)]


def test_an_unknown_remote_write_proto_is_415(client: TestClient, auth: Auth) -> None:
    headers = {**auth("remote_write"), **REMOTE_WRITE_HEADERS, "Content-Type": "application/x-protobuf;proto=v3"}
    answer = client.post("/api/v1/write", content=write_request([]), headers=headers)
    assert answer.status_code == 415 and "io.prometheus.write.v2.Request" in answer.json()["error"]["message"]


def test_each_node_has_its_own_scrape_interval(writer: Writer, client: TestClient, auth: Auth) -> None:
    other = GPU | {"Hostname": "gpu-2"}
    writer(
        [
            (named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 60.0), (T0 + 15, 61.0)]),
            (named("DCGM_FI_DEV_GPU_TEMP", **other), [(T0, 60.0), (T0 + 60, 61.0)]),
        ]
    )
    viewer = auth("viewer")
    assert client.get("/api/v1/nodes/gpu-1", headers=viewer).json()["resolution_seconds"] == 15.0
    assert client.get("/api/v1/nodes/gpu-2", headers=viewer).json()["resolution_seconds"] == 60.0


def test_an_agent_that_starts_reporting_a_node_makes_it_the_agents(
    writer: Writer, client: TestClient, auth: Auth
) -> None:
    writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0, 60.0), (T0 + 15, 61.0)])])
    pushed = client.post(
        "/api/v1/ingest",
        json={"node_id": "gpu-1", "samples": [gpu_sample(1, T0 + 30)]},
        headers=auth("agent", node_id="gpu-1"),
    )
    assert pushed.status_code == 200
    node = client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()
    assert (node["source"], node["resolution_seconds"]) == ("agent", None)
    status, text = writer([(named("DCGM_FI_DEV_GPU_TEMP", **GPU), [(T0 + 30, 62.0)])])  # its Prometheus goes on
    assert status == 400 and "agent_node" in text  # refused: the agent's node is the agent's (issue 35 #4)
    assert client.get("/api/v1/nodes/gpu-1", headers=auth("viewer")).json()["source"] == "agent"


def otlp_histogram(name: str, points: int, ts: float, **attributes: str) -> bytes:
    """An OTLP histogram of ``points`` data points (bounds 0.1, 1): each makes 5 samples (_sum, _count, 3 buckets)."""
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    metric = resource.scope_metrics.add().metrics.add(name=name, unit="s")
    metric.histogram.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    for i in range(points):
        point = metric.histogram.data_points.add(time_unix_nano=int(ts * 1e9), count=3, sum=1.5)
        point.explicit_bounds.extend([0.1, 1.0])
        point.bucket_counts.extend([1, 1, 1])
        for key, text in {**attributes, "route": f"/r{i}"}.items():
            point.attributes.add(key=key, value={"string_value": text})
    body: bytes = request.SerializeToString()
    return body


def otlp_post(client: TestClient, auth: Auth, *bodies: bytes) -> list[ExportMetricsServiceResponse]:
    headers = {**auth("remote_write"), "Content-Type": "application/x-protobuf"}
    answers = [client.post("/api/v1/otlp/v1/metrics", content=body, headers=headers) for body in bodies]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    return [ExportMetricsServiceResponse.FromString(a.content) for a in answers]


def test_otlp_partial_success_counts_and_names_the_families_no_mapping_reads(client: TestClient, auth: Auth) -> None:
    """An unmapped family was a 200 with an empty partial_success (issue 39): the OTLP specification's
    rejected_data_points counts data points (a histogram's one, not its 5 samples) and error_message names them."""
    (answer,) = otlp_post(client, auth, otlp_gauge("app_queue_length", 3.0, T0, host_name="gpu-1"))
    assert answer.partial_success.rejected_data_points == 1
    assert "app_queue_length" in answer.partial_success.error_message
    # a mapped gauge beside an unmapped histogram of two data points
    request = ExportMetricsServiceRequest.FromString(otlp_histogram("http.server.duration", 2, T0, host_name="gpu-1"))
    request.MergeFrom(ExportMetricsServiceRequest.FromString(otlp_gauge("DCGM_FI_DEV_GPU_UTIL", 42.0, T0, **GPU)))
    (mixed,) = otlp_post(client, auth, request.SerializeToString())
    assert mixed.partial_success.rejected_data_points == 2
    message = mixed.partial_success.error_message
    assert "http_server_duration_seconds" in message and "DCGM" not in message, message
    assert "/api/v1/unmapped-families" in message


def test_otlp_instrument_names_lowercased_by_the_sdk_take_the_mapping(
    client: TestClient, auth: Auth, engine: Engine
) -> None:
    """The OpenTelemetry SDK lowercases instrument names (its API calls them case-insensitive): its
    dcgm_fi_dev_gpu_util is dcgm-exporter's DCGM_FI_DEV_GPU_UTIL, and vanished unmapped."""
    (answer,) = otlp_post(client, auth, otlp_gauge("dcgm_fi_dev_gpu_util", 42.0, T0, gpu="1", Hostname="gpu-2"))
    assert not answer.HasField("partial_success"), answer
    assert stored(engine, "gpu_utilization_ratio") == [(T0, 1, "", pytest.approx(0.42))]


def test_remote_write_names_stay_case_sensitive(writer: Writer, engine: Engine) -> None:
    """Prometheus names are case-sensitive: a lowercased DCGM name over remote write is some other series."""
    assert writer([(named("dcgm_fi_dev_gpu_util", **GPU), [(T0, 42.0)])])[0] == 204
    assert stored(engine, "gpu_utilization_ratio") == []


def test_unmapped_families_are_listed_by_source_with_counts_and_last_seen(
    writer: Writer, client: TestClient, auth: Auth, services: AppServices
) -> None:
    writer([(named("go_goroutines", job="dcgm", instance="a:9400"), [(T0, 12.0), (T0 + 15, 13.0)])])
    buckets = [(named("go_gc_duration_seconds_bucket", le=le, instance="a:9400"), [(T0, 1.0)]) for le in BOUNDS]
    writer([*buckets, (named("go_gc_duration_seconds_count", instance="a:9400"), [(T0, 1.0)])])
    otlp_post(client, auth, otlp_gauge("app_queue_length", 3.0, T0, host_name="gpu-1"))
    services.remote.unmapped.flush(services.clock())
    answer = client.get("/api/v1/unmapped-families", headers=auth("viewer"))
    assert answer.status_code == 200, answer.text
    found = {(i["source"], i["name"]): i for i in answer.json()["items"]}
    assert set(found) == {
        ("remote_write", "go_goroutines"),
        ("remote_write", "go_gc_duration_seconds"),  # a histogram's _bucket, _count and _sum are one family
        ("otlp", "app_queue_length"),
    }
    assert found[("remote_write", "go_goroutines")]["samples"] == 2
    assert found[("remote_write", "go_gc_duration_seconds")]["samples"] == 5
    assert found[("otlp", "app_queue_length")]["last_seen"] == pytest.approx(services.clock())
    only = client.get("/api/v1/unmapped-families?source=otlp", headers=auth("viewer")).json()["items"]
    assert [i["name"] for i in only] == ["app_queue_length"]
    first = client.get("/api/v1/unmapped-families?limit=2", headers=auth("viewer")).json()
    rest = client.get(f"/api/v1/unmapped-families?limit=2&cursor={first['next']}", headers=auth("viewer")).json()
    assert len(first["items"]) == 2 and len(rest["items"]) == 1 and rest["next"] is None
    assert client.get("/api/v1/unmapped-families", headers=auth("remote_write")).status_code == 403
