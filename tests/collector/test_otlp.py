"""OTLP metrics become the series Prometheus' OTLP receiver would store: names, labels, histograms, what is dropped."""

from __future__ import annotations

import gzip
from collections.abc import Mapping

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    DataPointFlags,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
    Summary,
    SummaryDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from collector.remote.otlp import (
    DROP_REASONS,
    PROMOTED_RESOURCE_ATTRIBUTES,
    InvalidOtlpBody,
    MetricKind,
    label_name,
    metric_name,
    otlp_series,
    parse_otlp,
)

T_NS = 1_764_424_800_500_000_000  # 2025-11-29T14:00:00.5Z
T = 1_764_424_800.5
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
UNSPECIFIED = AggregationTemporality.AGGREGATION_TEMPORALITY_UNSPECIFIED
NO_RECORDED_VALUE = DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK

Attrs = Mapping[str, str | int | float | bool]
Labels = frozenset[tuple[str, str]]


def attributes(values: Attrs) -> list[KeyValue]:
    def any_value(value: str | int | float | bool) -> AnyValue:
        if isinstance(value, bool):
            return AnyValue(bool_value=value)
        if isinstance(value, int):
            return AnyValue(int_value=value)
        if isinstance(value, float):
            return AnyValue(double_value=value)
        return AnyValue(string_value=value)

    return [KeyValue(key=key, value=any_value(value)) for key, value in values.items()]


def number(value: float | None, attrs: Attrs | None = None, ts: int = T_NS, flags: int = 0) -> NumberDataPoint:
    point = NumberDataPoint(attributes=attributes(attrs or {}), time_unix_nano=ts, flags=flags)
    if isinstance(value, int):
        point.as_int = value
    elif value is not None:
        point.as_double = value
    return point


def gauge(name: str, *points: NumberDataPoint, unit: str = "") -> Metric:
    return Metric(name=name, unit=unit, gauge=Gauge(data_points=points))


def counter(
    name: str, *points: NumberDataPoint, unit: str = "", monotonic: bool = True, temporality: int = CUMULATIVE
) -> Metric:
    data = Sum(data_points=points, is_monotonic=monotonic, aggregation_temporality=temporality)  # type: ignore[arg-type]
    return Metric(name=name, unit=unit, sum=data)


def histogram(
    name: str,
    bounds: list[float],
    counts: list[int],
    total: float | None = None,
    attrs: Attrs | None = None,
    unit: str = "",
    temporality: int = CUMULATIVE,
) -> Metric:
    point = HistogramDataPoint(
        attributes=attributes(attrs or {}),
        time_unix_nano=T_NS,
        count=sum(counts),
        explicit_bounds=bounds,
        bucket_counts=counts,
    )
    if total is not None:
        point.sum = total
    data = Histogram(data_points=[point], aggregation_temporality=temporality)  # type: ignore[arg-type]
    return Metric(name=name, unit=unit, histogram=data)


def summary(name: str, count: int, total: float, quantiles: dict[float, float], unit: str = "") -> Metric:
    values = [SummaryDataPoint.ValueAtQuantile(quantile=q, value=v) for q, v in quantiles.items()]
    point = SummaryDataPoint(time_unix_nano=T_NS, count=count, sum=total, quantile_values=values)
    return Metric(name=name, unit=unit, summary=Summary(data_points=[point]))


def request(*metrics: Metric, resource: Attrs | None = None) -> ExportMetricsServiceRequest:
    resource_metrics = ResourceMetrics(
        resource=Resource(attributes=attributes(resource or {})), scope_metrics=[ScopeMetrics(metrics=metrics)]
    )
    return ExportMetricsServiceRequest(resource_metrics=[resource_metrics])


def series_of(req: ExportMetricsServiceRequest) -> dict[Labels, tuple[tuple[float, float], ...]]:
    return {frozenset(series.labels.items()): series.samples for series in otlp_series(req).series}


def labels(name: str, **more: str) -> Labels:
    return frozenset({"__name__": name, **more}.items())


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        # the cases of prometheus/otlptranslator metric_namer_test.go (UTF8Allowed=false, WithMetricSuffixes=true)
        ("requests", "", "monotonic_counter", "requests_total"),
        ("cpu_usage", "1", "gauge", "cpu_usage_ratio"),
        ("items", "1", "monotonic_counter", "items_total"),
        ("response_time", "ms", "gauge", "response_time_milliseconds"),
        ("memory_usage", "By", "gauge", "memory_usage_bytes"),
        ("requests", "1/s", "gauge", "requests_per_second"),
        ("throughput", "By/s", "gauge", "throughput_bytes_per_second"),
        ("custom_metric", "custom_unit", "gauge", "custom_metric_custom_unit"),
        ("custom_metric", "{custom}", "gauge", "custom_metric"),
        ("custom_metric", "By/{custom}", "gauge", "custom_metric_bytes"),
        ("requests_total", "", "monotonic_counter", "requests_total"),
        ("cpu_usage_ratio", "1", "gauge", "cpu_usage_ratio"),
        ("response_time_seconds", "s", "gauge", "response_time_seconds"),
        ("requests", "1/s", "monotonic_counter", "requests_per_second_total"),
        ("requests_per_second", "1/s", "gauge", "requests_per_second_per_second"),  # upstream's too: per is one token
        ("123_requests", "", "monotonic_counter", "_123_requests_total"),
        ("metric__with__multiple__underscores", "unit__multiple__underscores", "gauge",
         "metric_with_multiple_underscores_unit_multiple_underscores"),
        ("custom_metric", "unit@with#special/chars", "gauge", "custom_metric_unit_with_special_per_chars"),
        ("@#$%", "", "gauge", ""),
        ("request_duration", "s", "other", "request_duration_seconds"),
        ("active_connections", "", "other", "active_connections"),
        ("uptime", "d", "gauge", "uptime_days"),
        # semantic-convention names
        ("http.server.request.duration", "s", "other", "http_server_request_duration_seconds"),
        ("gpu.memory.used", "MiBy", "gauge", "gpu_memory_used_mebibytes"),
        ("gpu.utilization", "1", "gauge", "gpu_utilization_ratio"),
        ("gpu.utilization", "1", "other", "gpu_utilization"),  # a non-monotonic sum gets no _ratio
        ("gpu.temperature", "Cel", "gauge", "gpu_temperature_celsius"),
        ("total.requests", "", "monotonic_counter", "requests_total"),  # "total" moves to the end
        ("cpu_seconds_total", "s", "monotonic_counter", "cpu_seconds_total"),
        ("vllm:num_requests_running", "", "gauge", "vllm:num_requests_running"),
    ],
)  # fmt: skip
def test_metric_names_follow_prometheus_normalization(name: str, unit: str, kind: MetricKind, expected: str) -> None:
    assert metric_name(name, unit, kind) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("http.method", "http_method"),
        ("k8s.pod.name", "k8s_pod_name"),
        ("123invalid", "key_123invalid"),
        ("_private", "key_private"),
        ("__reserved__", "__reserved__"),
        ("model", "model"),
        ("vllm:engine", "vllm_engine"),
        ("é", "key_"),
        ("", None),
    ],
)
def test_label_names_follow_prometheus_normalization(key: str, expected: str | None) -> None:
    assert label_name(key) == expected


def test_each_promoted_resource_attribute_is_named_as_a_label_name() -> None:
    assert [label_name(key) for key in PROMOTED_RESOURCE_ATTRIBUTES] == [
        "host_name",
        "k8s_node_name",
        "k8s_pod_name",
        "k8s_namespace_name",
    ]


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (gauge("queue.depth", number(3, {"pool": "llama"})), {labels("queue_depth", pool="llama"): ((T, 3.0),)}),
        (gauge("kv.usage", number(0.25), unit="1"), {labels("kv_usage_ratio"): ((T, 0.25),)}),
        (counter("tokens", number(1200), unit="{token}"), {labels("tokens_total"): ((T, 1200.0),)}),
        (counter("inflight", number(-2.0), monotonic=False), {labels("inflight"): ((T, -2.0),)}),
        (
            summary("latency", 10, 2.5, {0.5: 0.2, 0.99: 0.9}, unit="s"),
            {
                labels("latency_seconds_sum"): ((T, 2.5),),
                labels("latency_seconds_count"): ((T, 10.0),),
                labels("latency_seconds", quantile="0.5"): ((T, 0.2),),
                labels("latency_seconds", quantile="0.99"): ((T, 0.9),),
            },
        ),
        (
            histogram("size", [1024.0], [4, 1], unit="By"),  # no sum set: no _sum series
            {
                labels("size_bytes_count"): ((T, 5.0),),
                labels("size_bytes_bucket", le="1024"): ((T, 4.0),),
                labels("size_bytes_bucket", le="+Inf"): ((T, 5.0),),
            },
        ),
    ],
    ids=["gauge-int", "gauge-ratio", "monotonic-sum", "non-monotonic-sum", "summary", "histogram-without-sum"],
)
def test_each_kind_makes_the_series_prometheus_makes(metric: Metric, expected: dict[Labels, object]) -> None:
    assert series_of(request(metric)) == expected


def test_histogram_buckets_count_up_to_their_bound() -> None:
    # counts per bucket (≤0.1, ≤0.5, ≤1, >1) = (2, 3, 0, 1) → cumulative 2, 5, 5 and 6 at +Inf
    req = request(histogram("ttft", [0.1, 0.5, 1.0], [2, 3, 0, 1], total=2.75, unit="s", attrs={"model": "m"}))
    assert series_of(req) == {
        labels("ttft_seconds_sum", model="m"): ((T, 2.75),),
        labels("ttft_seconds_count", model="m"): ((T, 6.0),),
        labels("ttft_seconds_bucket", model="m", le="0.1"): ((T, 2.0),),
        labels("ttft_seconds_bucket", model="m", le="0.5"): ((T, 5.0),),
        labels("ttft_seconds_bucket", model="m", le="1"): ((T, 5.0),),
        labels("ttft_seconds_bucket", model="m", le="+Inf"): ((T, 6.0),),
    }


def test_resource_names_the_job_and_instance_and_promotes_node_attributes() -> None:
    resource = {
        "service.namespace": "inference",
        "service.name": "vllm",
        "service.instance.id": "pod-7:8000",
        "host.name": "gpu-node-3",
        "k8s.node.name": "gpu-node-3",
        "k8s.pod.name": "vllm-7",
        "k8s.namespace.name": "serving",
        "cloud.region": "eu-west-1",  # not promoted
    }
    req = request(gauge("up", number(1, {"job": "mine", "k8s.pod.name": "from-point"})), resource=resource)
    expected = labels(
        "up",
        job="inference/vllm",  # service.* wins over a point's own job
        instance="pod-7:8000",
        host_name="gpu-node-3",
        k8s_node_name="gpu-node-3",
        k8s_pod_name="from-point",  # a point's attribute wins over a promoted one
        k8s_namespace_name="serving",
    )
    assert series_of(req) == {expected: ((T, 1.0),)}


def test_job_is_the_service_name_alone_without_a_namespace() -> None:
    req = request(gauge("up", number(1)), resource={"service.name": "sglang"})
    assert series_of(req) == {labels("up", job="sglang"): ((T, 1.0),)}


def test_attribute_values_of_any_type_become_text_and_colliding_names_are_joined() -> None:
    point = number(1, {"a.b": "dot", "a_b": "underscore", "n": 42, "x": 0.5, "f": 2.0, "ok": True})
    point.attributes.append(
        KeyValue(key="list", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1)])))
    )
    req = request(gauge("g", point))
    # keys are sorted before renaming: "a.b" < "a_b", so dot's value comes first
    assert series_of(req) == {
        labels("g", a_b="dot;underscore", n="42", x="0.5", f="2", ok="true", list="[1]"): ((T, 1.0),)
    }


def test_points_of_one_label_set_share_a_series() -> None:
    req = request(gauge("g", number(1.0, ts=T_NS), number(2.0, ts=T_NS + 500_000_000), number(7.0, {"a": "b"})))
    assert series_of(req) == {labels("g"): ((T, 1.0), (T + 0.5, 2.0)), labels("g", a="b"): ((T, 7.0),)}


def exponential_histogram() -> Metric:
    point = ExponentialHistogramDataPoint(time_unix_nano=T_NS, count=1, scale=0)
    data = ExponentialHistogram(data_points=[point, point], aggregation_temporality=CUMULATIVE)
    return Metric(name="exp", exponential_histogram=data)


@pytest.mark.parametrize(
    ("metric", "reason", "count"),
    [
        (counter("requests", number(5), number(6), temporality=DELTA), "delta_temporality", 2),
        (histogram("latency", [1.0], [1, 0], temporality=DELTA), "delta_temporality", 1),
        (counter("requests", number(5), temporality=UNSPECIFIED), "unspecified_temporality", 1),
        (exponential_histogram(), "exponential_histogram", 2),
        (gauge("g", number(1.0, flags=NO_RECORDED_VALUE)), "no_recorded_value", 1),
        (gauge("g", number(None)), "no_value", 1),
        (gauge("g", number(1.0, ts=0)), "no_timestamp", 1),
        (gauge("...", number(1.0)), "invalid_name", 1),
        (gauge("g", number(1.0, {"": "x"})), "invalid_label", 1),
    ],
)
def test_points_that_cannot_be_converted_are_dropped_and_counted(metric: Metric, reason: str, count: int) -> None:
    conversion = otlp_series(request(metric, gauge("kept", number(1.0))))
    assert conversion.dropped == {reason: count}
    assert [series.labels["__name__"] for series in conversion.series] == ["kept"]
    assert reason in DROP_REASONS


def test_a_stale_histogram_point_is_one_dropped_point_and_no_series() -> None:
    metric = histogram("latency", [1.0], [1, 0])
    metric.histogram.data_points[0].flags = NO_RECORDED_VALUE
    conversion = otlp_series(request(metric))
    assert (conversion.series, conversion.dropped) == ([], {"no_recorded_value": 1})


def test_a_body_parses_back_into_its_request() -> None:
    req = request(gauge("g", number(1.0)), resource={"service.name": "s"})
    assert parse_otlp(req.SerializeToString()) == req


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not a protobuf", "wire type 6 at byte 0"),
        (gzip.compress(request(gauge("g", number(1.0))).SerializeToString()), "Content-Encoding: gzip"),
        (b'{"resourceMetrics": []}', "looks like JSON"),
    ],
    ids=["garbage", "gzip", "json"],
)
def test_a_body_that_is_not_the_protobuf_message_is_refused_saying_why(body: bytes, says: str) -> None:
    with pytest.raises(InvalidOtlpBody, match="not a protobuf ExportMetricsServiceRequest") as raised:
        parse_otlp(body)
    assert says in str(raised.value)
    assert isinstance(raised.value, ValueError)


def dynamo_frontend_request() -> ExportMetricsServiceRequest:
    """What NVIDIA Dynamo's frontend exposes, as an OpenTelemetry Collector (prometheus receiver, k8sattributes
    processor, otlphttp exporter) forwards it: names and labels from ai-dynamo/dynamo
    lib/runtime/src/metrics/prometheus_names.rs (commit 4415465e3e0d30b12163c3c3f15d49ed78b300a8, ``frontend_service``);
    the receiver keeps Prometheus names as they are and leaves the unit empty for the text format."""
    model = {"model": "Qwen/Qwen3-0.6B"}
    requests = number(41, {**model, "endpoint": "chat_completions", "request_type": "stream", "status": "success"})
    metrics = [
        counter("dynamo_frontend_requests_total", requests),
        gauge("dynamo_frontend_inflight_requests", number(3.0, model)),
        gauge("dynamo_frontend_queued_requests", number(1.0, model)),
        counter("dynamo_frontend_output_tokens_total", number(9_000.0, model)),
        histogram("dynamo_frontend_time_to_first_token_seconds", [0.05, 0.5], [30, 10, 1], 6.25, model),
    ]
    resource = {
        "service.name": "dynamo-frontend",
        "service.instance.id": "10.0.4.17:8000",
        "k8s.namespace.name": "dynamo",
        "k8s.pod.name": "frontend-6c9d-x2",
        "k8s.node.name": "gpu-a",
        "server.port": "8000",
    }
    return request(*metrics, resource=resource)


def test_a_dynamo_frontend_payload_keeps_its_prometheus_names_and_gains_node_labels() -> None:
    req = parse_otlp(dynamo_frontend_request().SerializeToString())
    conversion = otlp_series(req)
    base = {
        "job": "dynamo-frontend",
        "instance": "10.0.4.17:8000",
        "k8s_namespace_name": "dynamo",
        "k8s_pod_name": "frontend-6c9d-x2",
        "k8s_node_name": "gpu-a",
        "model": "Qwen/Qwen3-0.6B",
    }
    by_labels = series_of(req)
    assert conversion.dropped == {}
    assert by_labels[labels("dynamo_frontend_inflight_requests", **base)] == ((T, 3.0),)
    requests = labels(
        "dynamo_frontend_requests_total", **base, endpoint="chat_completions", request_type="stream", status="success"
    )
    assert by_labels[requests] == ((T, 41.0),)
    assert by_labels[labels("dynamo_frontend_time_to_first_token_seconds_bucket", **base, le="0.5")] == ((T, 40.0),)
    assert sorted({series.labels["__name__"] for series in conversion.series}) == [
        "dynamo_frontend_inflight_requests",
        "dynamo_frontend_output_tokens_total",
        "dynamo_frontend_queued_requests",
        "dynamo_frontend_requests_total",
        "dynamo_frontend_time_to_first_token_seconds_bucket",
        "dynamo_frontend_time_to_first_token_seconds_count",
        "dynamo_frontend_time_to_first_token_seconds_sum",
    ]
