"""The collector's own metrics, on an explicit registry with fixed label sets (``fleetpilot_collector_*``)."""

from __future__ import annotations

from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Histogram

from wire.refusals import RefusalReason


class RejectReason(StrEnum):
    INVALID = "invalid"
    TOO_LARGE = "too_large"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    OVERLOADED = "overloaded"


class IngestTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.samples = Counter(
            "fleetpilot_collector_ingested_samples",
            "Samples received on /api/v1/ingest, by outcome (accepted, duplicate, or why refused alone: "
            "too_many_pools, too_old).",
            ["outcome"],
            registry=registry,
        )
        self.rejected = Counter(
            "fleetpilot_collector_rejected_requests",
            "Ingest requests rejected whole (nothing of them stored), by reason.",
            ["reason"],
            registry=registry,
        )
        self.requests = Counter(
            "fleetpilot_collector_ingest_requests",
            "Ingest requests, by HTTP status code.",
            ["code"],
            registry=registry,
        )
        self.duration = Histogram(
            "fleetpilot_collector_ingest_duration_seconds",
            "Time from receiving an ingest body to its commit.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )
        self.database_errors = Counter(
            "fleetpilot_collector_database_errors",
            "Database operations that failed, by operation.",
            ["operation"],
            registry=registry,
        )
        for outcome in ("accepted", "duplicate", *RefusalReason):
            self.samples.labels(outcome)
        for reason in RejectReason:
            self.rejected.labels(reason.value)


class RemoteTelemetry:
    """Prometheus remote write and OTLP in (``fleetpilot_collector_remote_*``): every point a request carried, by
    outcome — ``stored``, ``duplicate`` or why it was dropped (``collector.remote.staging.Dropped``) — and the
    samples derived from them."""

    def __init__(self, registry: CollectorRegistry, outcomes: tuple[str, ...]) -> None:
        self.points = Counter(
            "fleetpilot_collector_remote_points",
            "Points received by remote write or OTLP, by protocol and outcome (stored, duplicate, or why dropped).",
            ["protocol", "outcome"],
            registry=registry,
        )
        self.samples = Counter(
            "fleetpilot_collector_remote_derived_samples",
            "Samples derived from remote-write or OTLP points and written (one per group and scrape time).",
            ["protocol"],
            registry=registry,
        )
        self.requests = Counter(
            "fleetpilot_collector_remote_requests",
            "Remote-write and OTLP requests, by protocol and HTTP status code.",
            ["protocol", "code"],
            registry=registry,
        )
        for protocol in ("remote_write", "otlp"):
            self.samples.labels(protocol)
            for outcome in ("stored", "duplicate", *outcomes):
                self.points.labels(protocol, outcome)
