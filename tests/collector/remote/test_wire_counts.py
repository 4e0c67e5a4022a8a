"""The wire-format counter against protobuf's own messages: what it counts is what the decoded message holds, a
bound is passed exactly when the count passes it, and no byte string makes it fail other than as malformed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from collector.remote.prompb.remote_pb2 import WriteRequest
from collector.remote.prompb.write_v2_pb2 import Request
from collector.remote.wire_counts import (
    MalformedWire,
    WireBounds,
    WireLimitExceeded,
    count_otlp,
    count_write_request,
    count_write_request_v2,
)

UNBOUNDED = WireBounds(max_series=10**9, max_samples=10**9, max_labels=10**9, max_labels_per_series=10**9)
Shape = list[tuple[int, int, int]]  # per series: labels, samples, exemplars
shapes = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 5), st.integers(0, 2)), max_size=30)


def v1(shape: Shape, metadata: int = 0) -> bytes:
    request = WriteRequest()
    for labels, samples, exemplars in shape:
        series = request.timeseries.add()
        for i in range(labels):
            series.labels.add(name=f"l{i}", value="v" * i)
        for i in range(samples):
            series.samples.add(value=float(i), timestamp=1_764_424_800_000 + i)
        for _ in range(exemplars):
            series.exemplars.add(value=1.0)
    for _ in range(metadata):
        request.metadata.add(metric_family_name="m")
    body: bytes = request.SerializeToString()
    return body


def v2(shape: Shape) -> bytes:
    request = Request(symbols=["", *(f"s{i}" for i in range(12))])
    for labels, samples, exemplars in shape:
        series = request.timeseries.add(labels_refs=[r % 13 for r in range(2 * labels)])
        for i in range(samples):
            series.samples.add(value=float(i), timestamp=i)
        for _ in range(exemplars):
            series.exemplars.add(value=1.0)
    body: bytes = request.SerializeToString()
    return body


def expected(shape: Shape, metadata: int = 0) -> dict[str, int]:
    return {
        "max_series": len(shape) + metadata,
        "max_samples": sum(s + e for _, s, e in shape),
        "max_labels": sum(labels for labels, _, _ in shape),
    }


def refused_at(count: Callable[[bytes, WireBounds], None], body: bytes, bound: str, limit: int) -> bool:
    try:
        count(body, _with(bound, limit))
    except WireLimitExceeded as exc:
        assert bound.removeprefix("max_") in str(exc) or "label pairs" in str(exc)
        return True
    return False


def _with(bound: str, limit: int) -> WireBounds:
    values = {"max_series": 10**9, "max_samples": 10**9, "max_labels": 10**9, bound: limit}
    return WireBounds(**values)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, metadata=st.integers(0, 3))
def test_remote_write_1_counts_what_protobuf_decodes(shape: Shape, metadata: int) -> None:
    body = v1(shape, metadata)
    assert len(WriteRequest.FromString(body).timeseries) == len(shape)
    for bound, n in expected(shape, metadata).items():
        assert not refused_at(count_write_request, body, bound, n)
        assert n == 0 or refused_at(count_write_request, body, bound, n - 1)


@settings(max_examples=60, deadline=None)
@given(shape=shapes)
def test_remote_write_2_counts_what_protobuf_decodes(shape: Shape) -> None:
    body = v2(shape)
    symbols = 13  # every symbol counts as a label too: 2.0 interns them once
    counts = expected(shape) | {"max_labels": symbols + sum(labels for labels, _, _ in shape)}
    for bound, n in counts.items():
        assert not refused_at(count_write_request_v2, body, bound, n)
        assert n == 0 or refused_at(count_write_request_v2, body, bound, n - 1)


def test_labels_per_series_are_bounded_naming_the_series() -> None:
    body = v1([(3, 1, 0), (65, 1, 0)])
    with pytest.raises(WireLimitExceeded, match=r"timeseries\[1\]: 65 labels, over 64"):
        count_write_request(body, WireBounds())


def otlp(attributes: int, bounds: int, quantiles: int) -> bytes:
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    resource.resource.attributes.add(key="host.name", value={"string_value": "n"})
    metrics = resource.scope_metrics.add().metrics
    gauge = metrics.add(name="g").gauge.data_points.add(as_double=1.0)
    histogram = metrics.add(name="h").histogram.data_points.add(count=1)
    histogram.explicit_bounds.extend(float(b) for b in range(bounds))
    histogram.bucket_counts.extend([0] * (bounds + 1))
    summary = metrics.add(name="s").summary.data_points.add(count=1)
    for q in range(quantiles):
        summary.quantile_values.add(quantile=q / 10, value=1.0)
    for point in (gauge, histogram, summary):
        for a in range(attributes):
            point.attributes.add(key=f"a{a}", value={"string_value": "v"})
    body: bytes = request.SerializeToString()
    return body


@settings(max_examples=40, deadline=None)
@given(attributes=st.integers(0, 8), bounds=st.integers(0, 40), quantiles=st.integers(0, 5))
def test_otlp_counts_the_samples_and_labels_the_conversion_makes(attributes: int, bounds: int, quantiles: int) -> None:
    body = otlp(attributes, bounds, quantiles)
    made = 1 + (3 + bounds) + (2 + quantiles)  # a gauge; _sum, _count, a bucket a bound and +Inf; a summary's
    labels = 1 + made * (attributes + 1)  # the resource's attribute, then each sample's labels and one more
    for bound, n in {"max_samples": made, "max_labels": labels}.items():
        assert not refused_at(count_otlp, body, bound, n)
        assert refused_at(count_otlp, body, bound, n - 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_counted_or_refused_as_malformed_never_a_crash(body: bytes) -> None:
    for count in (count_write_request, count_write_request_v2, count_otlp):
        with contextlib.suppress(MalformedWire):
            count(body, UNBOUNDED)


@pytest.mark.parametrize("cut", [1, 2, 5, 17])
def test_a_truncated_body_is_malformed(cut: int) -> None:
    body = v1([(4, 2, 0)] * 3)
    with pytest.raises(MalformedWire):
        count_write_request(body[:-cut], UNBOUNDED)
