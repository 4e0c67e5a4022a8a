"""Alerting's own metrics, on the services' registry with fixed label sets (``fleetpilot_alerting_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from alerting.lifecycle import AlertStatus, TransitionKind

DELIVERY_OUTCOMES = ("delivered", "failed", "abandoned", "dropped")


class AlertingTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.evaluation_duration = Histogram(
            "fleetpilot_alerting_evaluation_duration_seconds",
            "Time one evaluation of every rule takes, reading its inputs and writing its outcome included.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        self.evaluation_failures = Counter(
            "fleetpilot_alerting_evaluation_failures",
            "Evaluations that failed (the database away, a bad stored rule); the next one tries again.",
            registry=registry,
        )
        self.alerts = Gauge(
            "fleetpilot_alerting_alerts",
            "Active alerts after the last evaluation, by status.",
            ["status"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.transitions = Counter(
            "fleetpilot_alerting_transitions",
            "Alert transitions (firing, resolved, repeat), silenced ones included.",
            ["kind"],
            registry=registry,
        )
        self.silenced = Counter(
            "fleetpilot_alerting_silenced_transitions",
            "Transitions not notified because a silence matched them.",
            registry=registry,
        )
        self.deliveries = Counter(
            "fleetpilot_alerting_delivery_attempts",
            "Webhook delivery attempts by outcome (dropped: the target was deleted; abandoned: past the max age).",
            ["outcome"],
            registry=registry,
        )
        self.outbox_pending = Gauge(
            "fleetpilot_alerting_outbox_pending",
            "Notifications waiting for delivery (retries included).",
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.delivery_latency = Histogram(
            "fleetpilot_alerting_delivery_latency_seconds",
            "From the evaluation that made a notification to its successful delivery.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 15.0, 60.0, 300.0, 3600.0),
            registry=registry,
        )
        for status in (AlertStatus.PENDING, AlertStatus.FIRING):
            self.alerts.labels(status.value)
        for kind in TransitionKind:
            self.transitions.labels(kind.value)
        for outcome in DELIVERY_OUTCOMES:
            self.deliveries.labels(outcome)
