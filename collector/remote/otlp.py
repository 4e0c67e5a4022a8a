"""OTLP metrics (an ``ExportMetricsServiceRequest``) made into Prometheus-style series, as Prometheus' receiver does.

Followed: prometheus/prometheus ``storage/remote/otlptranslator/prometheusremotewrite`` (``FromMetrics``,
``createAttributes``, ``addHistogramDataPoints``, ``addSummaryDataPoints``; read at commit 002042c9e03c) and the
prometheus/otlptranslator namers (``normalizeName``, ``LabelNamer``; commit 0d792268aa9a) with the default strategy
``UnderscoreEscapingWithSuffixes``: legacy-charset names, unit and type suffixes, ``job``/``instance`` from
``service.*``, attribute collisions joined with ``;``.

Left out, each a point counted in ``dropped`` or a series not made: exponential histograms (Prometheus makes native
histograms; we store floats), delta and unspecified temporality (refused as by Prometheus without
``AllowDeltaTemporality``), points flagged ``NO_RECORDED_VALUE`` (Prometheus writes a stale marker; we have none),
``target_info``, ``_created`` series, exemplars, scope labels, a namespace prefix and the UTF-8 strategies. Unlike
Prometheus, a number point without a value (``no_value``, Prometheus writes 0) and a point without a timestamp
(``no_timestamp``, Prometheus writes Unix 0) are dropped too.
"""

from __future__ import annotations

import base64
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, get_args

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    DataPointFlags,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    SummaryDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from collector.errors import CollectorError
from collector.remote.series import RemoteSeries
from collector.remote.wire_counts import MalformedWire, WireBounds, count_otlp

DropReason = Literal[
    "delta_temporality",
    "unspecified_temporality",
    "exponential_histogram",
    "no_value",
    "no_recorded_value",
    "no_timestamp",
    "invalid_name",
    "invalid_label",
]
DROP_REASONS: tuple[DropReason, ...] = get_args(DropReason)

# Resource attributes that become labels (fleetpilot finds a series' node from them); Prometheus promotes none unless
# configured (``promote_resource_attributes``). A data point attribute of the same label name wins, as upstream.
PROMOTED_RESOURCE_ATTRIBUTES = ("host.name", "k8s.node.name", "k8s.pod.name", "k8s.namespace.name")
_PROMOTED_LABELS = {key: key.replace(".", "_") for key in PROMOTED_RESOURCE_ATTRIBUTES}  # what label_name makes

# otlptranslator's unitMap and perUnitMap: UCUM units (https://ucum.org/ucum.html) to Prometheus base-unit words.
UNIT_WORDS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "1": "",
    "%": "percent",
}
PER_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}

MetricKind = Literal["gauge", "monotonic_counter", "other"]
_NO_RECORDED_VALUE = DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
_DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA


class InvalidOtlpBody(CollectorError, ValueError):
    """The body is not a protobuf ``ExportMetricsServiceRequest``; the message says what it looks like instead."""


@dataclass(frozen=True)
class OtlpConversion:
    """The series one request made, and the data points it could not convert, counted by reason."""

    series: list[RemoteSeries]
    dropped: dict[str, int]


def parse_otlp(body: bytes, bounds: WireBounds | None = None) -> ExportMetricsServiceRequest:
    """The request in an OTLP/HTTP protobuf body (already decompressed); ``WireLimitExceeded`` past ``bounds``,
    counted before anything is decoded."""
    request = ExportMetricsServiceRequest()
    try:
        count_otlp(body, bounds or WireBounds())
        request.ParseFromString(body)
    except (DecodeError, MalformedWire) as error:
        if body[:2] == b"\x1f\x8b":
            hint = "it is gzip-compressed: send it with Content-Encoding: gzip"
        elif body.lstrip()[:1] in (b"{", b"["):
            hint = "it looks like JSON: this endpoint takes OTLP/HTTP protobuf (Content-Type: application/x-protobuf)"
        else:
            hint = str(error)
        raise InvalidOtlpBody(f"body: not a protobuf ExportMetricsServiceRequest ({len(body)} bytes): {hint}") from None
    return request


def otlp_series(request: ExportMetricsServiceRequest) -> OtlpConversion:
    """Every series the request's points make; samples of one label set, from any point, share one series."""
    converter = _Converter()
    for resource_metrics in request.resource_metrics:
        resource = _resource_labels(resource_metrics.resource)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                converter.add_metric(metric, resource)
    return converter.result()


def metric_name(name: str, unit: str, kind: MetricKind) -> str:
    """otlptranslator's ``normalizeName``: legacy characters only, then the unit's words unless the name already
    holds them, then ``total`` for monotonic counters and ``ratio`` for gauges of unit ``1`` (each moved to the end).
    ``("http.server.duration", "s", "other")`` → ``http_server_duration_seconds``; "" when nothing valid is left."""
    tokens = "".join(char if _is_metric_char(char) else " " for char in name).split()
    main, per = _unit_words(unit)
    if main and main not in tokens:
        tokens.append(main)
    if per and per not in tokens:  # upstream compares "per_second" with single tokens, so it never matches
        tokens.append(per)
    if kind == "monotonic_counter":
        tokens = [token for token in tokens if token != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        tokens = [token for token in tokens if token != "ratio"] + ["ratio"]
    normalized = "_".join(tokens)
    return f"_{normalized}" if normalized[:1].isdigit() else normalized


def label_name(key: str) -> str | None:
    """otlptranslator's ``LabelNamer``: ``http.method`` → ``http_method``, ``2xx`` → ``key_2xx``, ``_x`` → ``key_x``,
    ``é`` → ``key_``, ``__x`` kept; None for the empty key (upstream's only failure: the prefix always adds letters)."""
    if not key:
        return None
    sanitized = "".join(char if char.isascii() and char.isalnum() else "_" for char in key)
    if sanitized[0].isdigit():
        sanitized = f"key_{sanitized}"
    elif sanitized.startswith("_") and not sanitized.startswith("__"):
        sanitized = f"key{sanitized}"
    return sanitized


def _is_metric_char(char: str) -> bool:
    return (char.isascii() and char.isalnum()) or char == ":"


def _unit_words(unit: str) -> tuple[str, str]:
    """``By/s`` → ("bytes", "per_second"); a part in braces (an annotation such as ``{request}``) adds nothing."""
    main_unit, _, per_unit = unit.partition("/")
    main_unit, per_unit = main_unit.strip(), per_unit.strip()
    main = UNIT_WORDS.get(main_unit, main_unit) if main_unit and not _annotated(main_unit) else ""
    per = PER_UNIT_WORDS.get(per_unit, per_unit) if per_unit and not _annotated(per_unit) else ""
    main, per = _clean_unit(main), _clean_unit(per)
    return main, f"per_{per}" if per else ""


def _annotated(unit: str) -> bool:
    return "{" in unit or "}" in unit


def _clean_unit(words: str) -> str:
    """Invalid characters to ``_``, runs of ``_`` to one, no ``_`` at either end: ``unit@with#x`` → ``unit_with_x``."""
    replaced = "".join(char if _is_metric_char(char) else "_" for char in words)
    return "_".join(part for part in replaced.split("_") if part)


@dataclass(frozen=True)
class _ResourceLabels:
    """What a resource adds to each of its points: promoted attributes (below the point's own) and job/instance
    (above them)."""

    promoted: Mapping[str, str]
    identity: Mapping[str, str]


def _resource_labels(resource: Resource) -> _ResourceLabels:
    attributes = {kv.key: _text(kv.value) for kv in resource.attributes}
    promoted = {name: attributes[key] for key, name in _PROMOTED_LABELS.items() if key in attributes}
    identity: dict[str, str] = {}
    if "service.name" in attributes:
        namespace = attributes.get("service.namespace")
        service = attributes["service.name"]
        identity["job"] = f"{namespace}/{service}" if namespace is not None else service
    if "service.instance.id" in attributes:
        identity["instance"] = attributes["service.instance.id"]
    return _ResourceLabels(promoted, identity)


def _point_labels(attributes: Iterable[KeyValue], resource: _ResourceLabels) -> dict[str, str] | None:
    """``createAttributes``: attributes sorted by key and renamed, values of keys that rename alike joined with
    ``;``; None when a key cannot be named."""
    labels: dict[str, str] = {}
    for kv in sorted(attributes, key=lambda kv: kv.key):
        name = label_name(kv.key)
        if name is None:
            return None
        value = _text(kv.value)
        labels[name] = f"{labels[name]};{value}" if name in labels else value
    for name, value in resource.promoted.items():
        labels.setdefault(name, value)
    labels.update(resource.identity)
    return labels


def _text(value: AnyValue) -> str:
    """pdata's ``Value.AsString``: strings as they are, bools and numbers as text, bytes in base64, lists and maps
    as JSON."""
    raw = _raw(value)
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))  # JSON-like numbers, as pdata writes them: 2.0 → "2"
    if isinstance(raw, int | float):
        return repr(raw)
    return json.dumps(raw, sort_keys=True, separators=(",", ":"))


def _raw(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_raw(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _raw(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return getattr(value, kind) if kind is not None else ""


def _float_text(value: float) -> str:
    """Go's ``FormatFloat(v, 'f', -1, 64)`` for ``le`` and ``quantile``: 0.005 → "0.005", 1.0 → "1", 1e-07 →
    "0.0000001"."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return format(Decimal(repr(value)).normalize(), "f")


class _Converter:
    """Collects the series of one request, merging samples by label set, and counts what it drops."""

    def __init__(self) -> None:
        self._samples: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        self._dropped: Counter[str] = Counter()

    def result(self) -> OtlpConversion:
        series = [RemoteSeries(dict(labels), tuple(samples)) for labels, samples in self._samples.items()]
        return OtlpConversion(series, dict(self._dropped))

    def add_metric(self, metric: Metric, resource: _ResourceLabels) -> None:
        kind = metric.WhichOneof("data")
        if kind is None:
            return  # no data, no points: upstream reports an unsupported type and moves on
        points = getattr(metric, kind).data_points
        if kind not in {"gauge", "summary"}:
            temporality = getattr(metric, kind).aggregation_temporality
            if temporality != _CUMULATIVE:
                reason: DropReason = "delta_temporality" if temporality == _DELTA else "unspecified_temporality"
                self._dropped[reason] += len(points)
                return
        if kind == "exponential_histogram":
            self._dropped["exponential_histogram"] += len(points)
            return
        name = metric_name(metric.name, metric.unit, _kind(metric))
        if not name:
            self._dropped["invalid_name"] += len(points)
            return
        for point in points:
            labels = self._usable_labels(point, resource)
            if labels is None:
                continue
            if isinstance(point, NumberDataPoint):
                self._add_number(name, labels, point)
            elif isinstance(point, HistogramDataPoint):
                self._add_histogram(name, labels, point)
            else:
                self._add_summary(name, labels, point)

    def _usable_labels(
        self, point: NumberDataPoint | HistogramDataPoint | SummaryDataPoint, resource: _ResourceLabels
    ) -> dict[str, str] | None:
        """The point's labels, or None (and the point counted) when it carries nothing to store."""
        reason: DropReason | None = None
        labels = _point_labels(point.attributes, resource)
        if point.flags & _NO_RECORDED_VALUE:
            reason = "no_recorded_value"
        elif not point.time_unix_nano:
            reason = "no_timestamp"
        elif isinstance(point, NumberDataPoint) and point.WhichOneof("value") is None:
            reason = "no_value"
        elif labels is None:
            reason = "invalid_label"
        if reason is not None:
            self._dropped[reason] += 1
            return None
        return labels

    def _add_number(self, name: str, labels: dict[str, str], point: NumberDataPoint) -> None:
        value = float(point.as_int) if point.WhichOneof("value") == "as_int" else point.as_double
        self._add(name, labels, point.time_unix_nano, value)

    def _add_histogram(self, name: str, labels: dict[str, str], point: HistogramDataPoint) -> None:
        """``_sum`` (when set), ``_count``, and one ``_bucket`` per bound with the counts summed up to it, then
        ``le="+Inf"`` holding the count: bounds (1, 5) with counts (2, 3, 1) give 2, 5 and 6."""
        ts = point.time_unix_nano
        if point.HasField("sum"):
            self._add(f"{name}_sum", labels, ts, point.sum)
        self._add(f"{name}_count", labels, ts, float(point.count))
        cumulative = 0
        for bound, count in zip(point.explicit_bounds, point.bucket_counts, strict=False):
            cumulative += count
            self._add(f"{name}_bucket", {**labels, "le": _float_text(bound)}, ts, float(cumulative))
        self._add(f"{name}_bucket", {**labels, "le": "+Inf"}, ts, float(point.count))

    def _add_summary(self, name: str, labels: dict[str, str], point: SummaryDataPoint) -> None:
        ts = point.time_unix_nano
        self._add(f"{name}_sum", labels, ts, point.sum)
        self._add(f"{name}_count", labels, ts, float(point.count))
        for quantile in point.quantile_values:
            self._add(name, {**labels, "quantile": _float_text(quantile.quantile)}, ts, quantile.value)

    def _add(self, name: str, labels: Mapping[str, str], time_unix_nano: int, value: float) -> None:
        key = tuple(sorted({**labels, "__name__": name}.items()))
        self._samples.setdefault(key, []).append((time_unix_nano / 1e9, value))


def _kind(metric: Metric) -> MetricKind:
    """The type otlptranslator names by: a non-monotonic sum is named like a histogram, without ``_ratio``."""
    data = metric.WhichOneof("data")
    if data == "gauge":
        return "gauge"
    return "monotonic_counter" if data == "sum" and metric.sum.is_monotonic else "other"
