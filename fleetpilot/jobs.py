"""The server's background jobs on one APScheduler: rollups and retention (later: forecasts, scaling, alerts)."""

from __future__ import annotations

import logging
import time

from apscheduler.schedulers.background import BackgroundScheduler

from collector.retention import RetentionJob
from collector.rollups import RollupJob
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
    scheduler.start()
    return scheduler
