"""What the web layer is handed by the composition root: settings, storage and the clock, nothing global."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from alerting.telemetry import AlertingTelemetry
from autoscaler.actuators.base import Actuator
from autoscaler.controller import AutoscalerTelemetry
from autoscaler.scaling_events import EventStore
from collector.ingest import SampleWriter
from collector.minute_rollups import MinuteRollups
from collector.remote.receiver import RemoteWriter
from collector.telemetry import IngestTelemetry, RemoteTelemetry
from fleet.desired.board import DesiredBoard
from fleet.pools import PoolStore
from fleet.view import FleetReader
from isolation.enforcer import EnforcerTelemetry
from isolation.events import EnforcementStore
from predictor.store import ForecastStore
from predictor.telemetry import ForecastTelemetry
from web.ingest_gate import IngestAdmission
from web.remote_decodes import DecodeSlots
from web.settings import WebSettings
from web.tokens import TokenStore

if TYPE_CHECKING:
    from web.kube_tokens import KubeTokenVerifier


@dataclass
class AppServices:
    settings: WebSettings
    engine: Engine
    tokens: TokenStore
    writer: SampleWriter
    remote: RemoteWriter  # Prometheus remote write and OTLP in (collector.remote)
    registry: CollectorRegistry
    telemetry: IngestTelemetry
    remote_telemetry: RemoteTelemetry
    pools: PoolStore
    forecasts: ForecastStore
    forecast_telemetry: ForecastTelemetry
    events: EventStore
    actuator: Actuator
    autoscaler_telemetry: AutoscalerTelemetry
    enforcement: EnforcementStore
    enforcer_telemetry: EnforcerTelemetry
    alerting_telemetry: AlertingTelemetry
    fleet: FleetReader  # the one liveness-aware read of the fleet (one node_down_after_seconds)
    desired: DesiredBoard  # what each node should run and enforce, as the control loops last published it
    # Publish the tenants part now (isolation.desired.TenantsPublisher, set by the composition root): after an API
    # change of tenants, quotas or tenant keys, so it reaches the nodes at their next push, not the enforcer's tick.
    publish_tenants: Callable[[], object] = field(default=lambda: None)
    clock: Callable[[], float] = field(default=time.time)
    # Agents' projected ServiceAccount tokens (kubernetes_agent_auth), verified by TokenReview; None: off
    kube_tokens: KubeTokenVerifier | None = None
    # This process's minute aggregates, which the writer feeds and a job of its own flushes (collector.minute_rollups);
    # None: the rollup job rolls the raw samples
    minute_rollups: MinuteRollups | None = None
    # What /metrics answers: ``registry`` itself, or with --workers every worker's metrics summed (the composition
    # root decides; fleetpilot.server.exposition_registry)
    exposition: CollectorRegistry | None = None
    ingest_gate: IngestAdmission = field(init=False)
    remote_decodes: DecodeSlots = field(init=False)  # remote-write and OTLP bodies decoded at once

    def __post_init__(self) -> None:
        self.remote_decodes = DecodeSlots(self.settings.remote_write_max_concurrent_decodes)
        self.ingest_gate = IngestAdmission(
            self.settings.ingest_max_in_flight,
            max_queue_seconds=self.settings.ingest_shed_queue_seconds,
            max_loop_lag_seconds=self.settings.ingest_shed_loop_lag_seconds,
        )
