"""The fleet's one liveness-aware read, as the composition root builds it (``fleetpilot.server.build_services``),
for tests that build a loop without the whole server."""

from __future__ import annotations

from sqlalchemy import Engine

from fleet.view import FleetReader

DOWN_AFTER_SECONDS = 3.0  # ServerSettings' default


def fleet_reader(
    engine: Engine, *, node_down_after_seconds: float = DOWN_AFTER_SECONDS, cpu_replicas_per_node: int = 4
) -> FleetReader:
    return FleetReader(
        engine, node_down_after_seconds=node_down_after_seconds, cpu_replicas_per_node=cpu_replicas_per_node
    )
