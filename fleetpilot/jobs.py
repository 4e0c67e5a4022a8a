"""The server's background jobs on one APScheduler: rollups, retention, forecasts, the autoscaler and the enforcer
(later: alerts)."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.controller import Controller, ControllerSettings
from collector.retention import RetentionJob
from collector.rollups import RollupJob
from isolation.enforcer import Enforcer, EnforcerLoopSettings
from isolation.noisy import EnforcerSettings
from predictor.loop import ForecastJob, ForecastSettings
from web.services import AppServices

log = logging.getLogger(__name__)


@dataclass
class Jobs:
    """The running scheduler and what to do after it stops (release the leader lease, stop the forecast worker)."""

    scheduler: BackgroundScheduler
    on_stop: list[Callable[[], None]]

    def shutdown(self) -> None:
        self.scheduler.shutdown(wait=False)
        for step in self.on_stop:
            try:
                step()
            except Exception:  # a database already gone: the lease then simply expires
                log.exception("stopping a background job failed")


def start_jobs(services: AppServices) -> Jobs:
    settings = services.settings
    rollups = RollupJob(services.engine, lookback_seconds=settings.rollup_lookback_seconds)
    retention = RetentionJob(
        services.engine,
        raw_retention_seconds=settings.raw_retention_hours * 3600,
        rollup_retention_seconds=settings.rollup_retention_days * 86400,
    )
    scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
    _every(scheduler, "rollups", settings.rollup_interval_seconds, rollups.run)
    _every(scheduler, "retention", settings.retention_interval_seconds, retention.run)
    forecasts = ForecastJob(services.engine, forecast_settings(services), telemetry=services.forecast_telemetry)
    _every(scheduler, "forecasts", settings.forecast_interval_seconds, forecasts.run)
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    controller = Controller(
        services.engine,
        ControllerSettings(
            interval_seconds=settings.autoscale_interval_seconds,
            node_down_after_seconds=settings.node_down_after_seconds,
            forecast_stale_after_seconds=3 * settings.forecast_interval_seconds,
            lease_seconds=settings.leader_lease_seconds,
            cpu_replicas_per_node=settings.cpu_replicas_per_node,
            settle_seconds=max(10.0, 3 * settings.node_down_after_seconds),
        ),
        services.actuator,
        holder=holder,
        telemetry=services.autoscaler_telemetry,
    )
    _every(scheduler, "autoscaler", settings.autoscale_interval_seconds, controller.run)
    enforcer = Enforcer(
        services.engine, enforcer_settings(services), holder=holder, telemetry=services.enforcer_telemetry
    )
    _every(scheduler, "enforcer", settings.enforce_interval_seconds, enforcer.run)
    scheduler.start()
    return Jobs(scheduler, [forecasts.close, controller.stop, enforcer.stop])


class _Tick(Protocol):
    def __call__(self, *, now: float) -> object: ...


def _every(scheduler: BackgroundScheduler, name: str, seconds: float, tick: _Tick) -> None:
    """Run ``tick(now=...)`` every ``seconds`` under ``name`` (coalesced, one instance at a time)."""
    scheduler.add_job(lambda: tick(now=time.time()), "interval", seconds=seconds, id=name, name=name)


def forecast_settings(services: AppServices) -> ForecastSettings:
    s = services.settings
    return ForecastSettings(
        horizon_seconds=s.forecast_horizon_seconds,
        pool_history_seconds=s.forecast_pool_history_hours * 3600,
        node_history_seconds=s.forecast_node_history_hours * 3600,
        timeout_seconds=s.forecast_timeout_seconds,
        capacity_window_seconds=s.capacity_window_seconds,
        capacity_refresh_seconds=s.capacity_refresh_seconds,
        exhaustion_ratio=s.forecast_exhaustion_ratio,
        node_down_after_seconds=s.node_down_after_seconds,
        model=s.forecast_model,
    )


def enforcer_settings(services: AppServices) -> EnforcerLoopSettings:
    s = services.settings
    return EnforcerLoopSettings(
        interval_seconds=s.enforce_interval_seconds,
        node_down_after_seconds=s.node_down_after_seconds,
        lease_seconds=s.leader_lease_seconds,
        decide=EnforcerSettings(
            noisy_compute_share=s.enforce_noisy_compute_share,
            trigger_windows=s.enforce_trigger_windows,
            calm_windows=s.enforce_calm_windows,
        ),
    )
