"""The forecast loop's own metrics (``fleetpilot_forecast_*``) on the server's registry."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge


class ForecastTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.cycle_seconds = Gauge(
            "fleetpilot_forecast_cycle_seconds",
            "Wall time of the last forecast cycle.",
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.last_success = Gauge(
            "fleetpilot_forecast_last_success_timestamp_seconds",
            "When the last cycle that produced at least one good forecast finished (Unix seconds).",
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.forecasts = Counter(
            "fleetpilot_forecast_subjects",
            "Forecasts attempted, by kind (pool, device, replicas) and outcome (ok, failed).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.saturation_probability = Gauge(
            "fleetpilot_forecast_saturation_probability",
            "Probability that the pool's demand exceeds its capacity within the horizon.",
            ["pool"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )
        self.saturation_eta = Gauge(
            "fleetpilot_forecast_saturation_eta_seconds",
            "Seconds until the pool's demand is more likely than not over its capacity (absent when not expected).",
            ["pool"],
            registry=registry,
            multiprocess_mode="livemostrecent",
        )

    def set_saturation(self, pool: str, probability: float, eta_seconds: float | None) -> None:
        """A pool's latest estimate; no ETA leaves the ETA series absent rather than at a made-up value."""
        self.saturation_probability.labels(pool).set(probability)
        if eta_seconds is not None:
            self.saturation_eta.labels(pool).set(eta_seconds)
            return
        with contextlib.suppress(KeyError):  # never had one
            self.saturation_eta.remove(pool)
