"""The server's background jobs on one APScheduler: rollups, retention and forecasts (later: scaling, alerts)."""

from __future__ import annotations

import logging
import time

from apscheduler.schedulers.background import BackgroundScheduler

from collector.retention import RetentionJob
from collector.rollups import RollupJob
from predictor.loop import ForecastJob, ForecastSettings
from web.services import AppServices

log = logging.getLogger(__name__)


def start_jobs(services: AppServices) -> BackgroundScheduler:
    settings = services.settings
    rollups = RollupJob(services.engine, lookback_seconds=settings.rollup_lookback_seconds)
    retention = RetentionJob(
        services.engine,
        raw_retention_seconds=settings.raw_retention_hours * 3600,
        rollup_retention_seconds=settings.rollup_retention_days * 86400,
    )
    scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
    scheduler.add_job(
        lambda: rollups.run(now=time.time()),
        "interval",
        seconds=settings.rollup_interval_seconds,
        id="rollups",
        name="rollups",
    )
    scheduler.add_job(
        lambda: retention.run(now=time.time()),
        "interval",
        seconds=settings.retention_interval_seconds,
        id="retention",
        name="retention",
    )
    forecasts = ForecastJob(services.engine, forecast_settings(services), telemetry=services.forecast_telemetry)
    scheduler.add_job(
        lambda: forecasts.run(now=time.time()),
        "interval",
        seconds=settings.forecast_interval_seconds,
        id="forecasts",
        name="forecasts",
    )
    scheduler.start()
    return scheduler


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
