"""The built-in workload's own metrics (``fleetpilot_agent_replica*``, ``fleetpilot_agent_serving_*``), registered on
the agent's registry beside ``AgentTelemetry``, so they appear on the agent's ``/metrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from inference_agent.serving.supervision.reconcile import Phase


class ServingTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.replica_crashes = Counter(
            "fleetpilot_agent_replica_crashes",
            "Replica processes that exited unasked or never got warm, by pool.",
            ["pool"],
            registry=registry,
        )
        self.replica_actions = Counter(
            "fleetpilot_agent_replica_actions",
            "Supervisor actions, by verb and reason.",
            ["verb", "reason"],
            registry=registry,
        )
        self.replicas = Gauge(
            "fleetpilot_agent_replicas",
            "Replicas by pool and phase (starting, ready, draining, backoff: a crash loop shows as backoff).",
            ["pool", "phase"],
            registry=registry,
        )
        self.replica_backoff_crashes = Gauge(
            "fleetpilot_agent_replica_consecutive_crashes",
            "The highest count of consecutive crashes among a pool's replicas (0 once it runs a minute).",
            ["pool"],
            registry=registry,
        )
        self.replica_startup = Gauge(
            "fleetpilot_agent_replica_startup_seconds",
            "The latest replica's launch to its first ready /healthz, by pool (absent until one was ready).",
            ["pool"],
            registry=registry,
        )
        self.requests = Counter(
            "fleetpilot_agent_serving_requests",
            "Requests answered by the serving front end, by pool and status code.",
            ["pool", "code"],
            registry=registry,
        )
        self.queued = Gauge(
            "fleetpilot_agent_serving_queued_requests",
            "Requests admitted by the front end and waiting for a replica slot, by pool.",
            ["pool"],
            registry=registry,
        )

    def set_replicas(self, counts: dict[str, dict[Phase, int]], crashes: dict[str, int]) -> None:
        for pool, phases in counts.items():
            for phase in Phase:
                self.replicas.labels(pool, phase.value).set(phases.get(phase, 0))
            self.replica_backoff_crashes.labels(pool).set(crashes.get(pool, 0))
