"""What the web layer is handed by the composition root: settings, storage and the clock, nothing global."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from alerting.telemetry import AlertingTelemetry
from autoscaler.actuators.base import Actuator
from autoscaler.controller import AutoscalerTelemetry
from collector.ingest import SampleWriter
from collector.telemetry import IngestTelemetry
from fleet.pools import PoolStore
from fleet.scaling_events import EventStore
from fleet.view import FleetReader
from isolation.enforcer import EnforcerTelemetry
from isolation.events import EnforcementStore
from predictor.store import ForecastStore
from predictor.telemetry import ForecastTelemetry
from web.ingest_gate import InFlightLimit
from web.settings import WebSettings
from web.tokens import TokenStore

# What a node should run, as the control plane sees it; None while nothing is decided for the node.
DesiredStateSource = Callable[[str], dict[str, Any] | None]


def _nothing_desired(_node_id: str) -> dict[str, Any] | None:
    return None


@dataclass
class AppServices:
    settings: WebSettings
    engine: Engine
    tokens: TokenStore
    writer: SampleWriter
    registry: CollectorRegistry
    telemetry: IngestTelemetry
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
    desired_state: DesiredStateSource = _nothing_desired
    clock: Callable[[], float] = field(default=time.time)
    ingest_gate: InFlightLimit = field(init=False)

    def __post_init__(self) -> None:
        self.ingest_gate = InFlightLimit(self.settings.ingest_max_in_flight)
