"""The server's background jobs on one APScheduler: rollups, retention, forecasts, the autoscaler, the enforcer,
alert evaluation and webhook delivery.

Each job that works on the whole fleet runs on one server at a time however many share the database: the control
loops under their own leases (controller, enforcer, alerting), the data jobs — rollups, retention, forecasts, alert
history — under one lease each (:class:`OnceAcrossServers`, ``job:NAME``). Every server refreshes its own copy of the
desired-state board and delivers webhooks (the outbox's claims keep a delivery to one server).
"""

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
from prometheus_client import Counter
from sqlalchemy.exc import OperationalError

from alerting.evaluator import Evaluator, EvaluatorSettings
from alerting.outbox import DeliverySettings, Outbox
from alerting.retention import AlertHistoryRetention
from alerting.sender import HttpxSender
from alerting.target_address import AddressPolicy
from autoscaler.controller import Controller, ControllerSettings
from collector.partitions import PARTITION_INTERVAL_SECONDS, PartitionJob
from collector.remote.retention import StagingRetention
from collector.retention import RetentionJob
from collector.rollup_flush import RollupFlush
from collector.rollups import RollupJob
from collector.skipped_rows import Job, SkippedRows, skipped_rows_counter
from collector.tables import ROLLUP_BUCKET_SECONDS
from fleet.lease import Lease
from fleet.view import FleetReader
from fleetpilot.settings import ServerSettings
from isolation.enforcer import Enforcer, EnforcerLoopSettings
from isolation.noisy import EnforcerSettings
from predictor.loop import ForecastJob, ForecastSettings
from web.services import AppServices

log = logging.getLogger(__name__)

REMOTE_STAGING_INTERVAL_SECONDS = 60.0  # remote write's staged points past the window go every minute
DESIRED_REFRESH_SECONDS = 1.0  # a part published on another server reaches this one's ingest answers within 1 s
ROLLUP_FLUSH_SECONDS = 5.0  # each process's closed minutes go to rollups_1m within this of their flush delay


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


def start_jobs(services: AppServices, settings: ServerSettings) -> Jobs:
    skipped = skipped_rows_counter(services.registry)
    held = services.minute_rollups
    rollups = RollupJob(
        services.engine,
        lookback_seconds=settings.rollup_lookback_seconds,
        skipped=SkippedRows(Job.ROLLUPS, skipped),
        # a minute's late rows come in up to the lookback after it starts; a flush follows within two flush periods
        settle_seconds=None if held is None else settings.rollup_lookback_seconds + 2 * ROLLUP_FLUSH_SECONDS + 30,
    )
    retention = RetentionJob(
        services.engine,
        raw_retention_seconds=settings.raw_retention_hours * 3600,
        rollup_retention_seconds=settings.rollup_retention_days * 86400,
    )
    scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})

    def refresh_board(*, now: float) -> None:
        """Every server, leader or not: the parts another server's control loops published reach its answers."""
        services.desired.refresh()

    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    once: list[OnceAcrossServers] = []
    runs = Counter(
        "fleetpilot_jobs_runs",
        "Runs of a job that runs on one server at a time, counted by the server (process) that ran it.",
        ["job"],
        registry=services.registry,
    )

    def once_across_servers(name: str, seconds: float, tick: _Tick) -> None:
        lease = Lease(services.engine, f"job:{name}", holder, max(settings.leader_lease_seconds, 2 * seconds))
        job = OnceAcrossServers(lease, tick, runs.labels(name))
        once.append(job)
        _every(scheduler, name, seconds, job)

    _every(scheduler, "desired-board", DESIRED_REFRESH_SECONDS, refresh_board)
    once_across_servers("rollups", settings.rollup_interval_seconds, rollups.run)
    on_stop: list[Callable[[], None]] = []
    if held is not None:  # every process flushes the minutes it holds, and all of them when it stops
        flush = RollupFlush(services.engine, held)
        _every(scheduler, "rollup-flush", ROLLUP_FLUSH_SECONDS, flush.run)

        def flush_everything() -> None:  # the open minute too: a part flushed now merges with what comes later
            flush.run(time.time() + 2 * ROLLUP_BUCKET_SECONDS)

        on_stop.append(flush_everything)
    once_across_servers("retention", settings.retention_interval_seconds, retention.run)
    staging = StagingRetention(
        services.engine,
        window_seconds=settings.remote_write_window_seconds,
        idle_series_seconds=settings.remote_write_idle_series_seconds,
    )
    once_across_servers("remote-staging", REMOTE_STAGING_INTERVAL_SECONDS, staging.run)
    partitions = PartitionJob(services.engine)  # PostgreSQL: the coming hours' and days' partitions
    once_across_servers("partitions", PARTITION_INTERVAL_SECONDS, partitions.run)
    loops = build_loops(services, settings, holder=holder, skipped=skipped)
    once_across_servers("forecasts", settings.forecast_interval_seconds, loops.forecasts.run)
    _every(scheduler, "autoscaler", settings.autoscale_interval_seconds, loops.controller.run)
    _every(scheduler, "enforcer", settings.enforce_interval_seconds, loops.enforcer.run)
    _every(scheduler, "alerts", settings.alert_evaluation_interval_seconds, loops.evaluator.run)
    _every(scheduler, "webhooks", settings.webhook_poll_seconds, loops.outbox.run)
    history = AlertHistoryRetention(services.engine, keep_seconds=settings.alert_history_days * 86400)
    once_across_servers("alert-history", settings.retention_interval_seconds, history.run)
    scheduler.start()
    return Jobs(scheduler, on_stop + loops.on_stop() + [job.lease.release for job in once])


@dataclass(frozen=True)
class Loops:
    """The control loops a server runs, each reading the fleet through the services' one FleetReader."""

    forecasts: ForecastJob
    controller: Controller
    enforcer: Enforcer
    evaluator: Evaluator
    outbox: Outbox

    def on_stop(self) -> list[Callable[[], None]]:
        return [self.forecasts.close, self.controller.stop, self.enforcer.stop, self.evaluator.stop, self.outbox.close]


def build_loops(
    services: AppServices, settings: ServerSettings, *, holder: str, skipped: Counter | None = None
) -> Loops:
    """The loops as :func:`start_jobs` schedules them (and a test builds them, to tick them by hand)."""
    forecasts = ForecastJob(
        services.engine,
        forecast_settings(settings),
        fleet=services.fleet,
        telemetry=services.forecast_telemetry,
        skipped=SkippedRows(Job.FORECASTS, skipped),
    )
    controller = Controller(
        services.engine,
        ControllerSettings(
            interval_seconds=settings.autoscale_interval_seconds,
            forecast_stale_after_seconds=settings.forecast_stale_after_seconds,
            lease_seconds=settings.leader_lease_seconds,
            settle_seconds=max(10.0, 3 * services.fleet.node_down_after_seconds),
            scale_down_window_seconds=settings.scale_down_window_seconds,
        ),
        services.actuator,
        fleet=services.fleet,
        holder=holder,
        telemetry=services.autoscaler_telemetry,
        skipped=SkippedRows(Job.AUTOSCALER, skipped),
    )
    enforcer = Enforcer(
        services.fleet,
        enforcer_settings(settings),
        board=services.desired,
        holder=holder,
        telemetry=services.enforcer_telemetry,
        skipped=SkippedRows(Job.ENFORCER, skipped),
    )
    outbox = Outbox(
        services.engine,
        HttpxSender(
            timeout_seconds=settings.webhook_timeout_seconds,
            policy=AddressPolicy.allowing(settings.webhook_allowed_networks),
        ),
        delivery_settings(settings),
        telemetry=services.alerting_telemetry,
    )
    evaluator = Evaluator(
        services.engine,
        evaluator_settings(settings, services.fleet),
        fleet=services.fleet,
        holder=holder,
        telemetry=services.alerting_telemetry,
        on_notify=outbox.kick,
        skipped=SkippedRows(Job.ALERTS, skipped),
    )
    return Loops(forecasts, controller, enforcer, evaluator, outbox)


class _Tick(Protocol):
    def __call__(self, *, now: float) -> object: ...


class _Counted(Protocol):
    def inc(self) -> None: ...


@dataclass(frozen=True)
class OnceAcrossServers:
    """A job only the holder of its lease runs: with several servers on one database, one runs it each period and
    the others skip; a holder that stops (SIGKILL) loses the lease ``lease.ttl_seconds`` after its last run, and the
    next server to tick takes it over. The lease outlives two periods, so the holder keeps it from run to run."""

    lease: Lease
    tick: _Tick
    ran: _Counted | None = None  # counted once per run here (``fleetpilot_jobs_runs_total``)

    def __call__(self, *, now: float) -> object:
        if not self.lease.acquire(now):
            return None
        if self.ran is not None:
            self.ran.inc()
        return self.tick(now=now)


def _every(scheduler: BackgroundScheduler, name: str, seconds: float, tick: _Tick) -> None:
    """Run ``tick(now=...)`` every ``seconds`` under ``name`` (coalesced, one instance at a time). A database that
    is away is one warning line per run, not a traceback: every job simply tries again at its next run."""

    def run() -> None:
        try:
            tick(now=time.time())
        except OperationalError as exc:
            log.warning("%s: database unavailable (%s); the next run tries again", name, str(exc.orig).strip())

    scheduler.add_job(run, "interval", seconds=seconds, id=name, name=name)


def forecast_settings(s: ServerSettings) -> ForecastSettings:
    return ForecastSettings(
        horizon_seconds=s.forecast_horizon_seconds,
        pool_history_seconds=s.forecast_pool_history_hours * 3600,
        node_history_seconds=s.forecast_node_history_hours * 3600,
        timeout_seconds=s.forecast_timeout_seconds,
        capacity_window_seconds=s.capacity_window_seconds,
        capacity_refresh_seconds=s.capacity_refresh_seconds,
        exhaustion_ratio=s.forecast_exhaustion_ratio,
        model=s.forecast_model,
    )


def enforcer_settings(s: ServerSettings) -> EnforcerLoopSettings:
    return EnforcerLoopSettings(
        interval_seconds=s.enforce_interval_seconds,
        lease_seconds=s.leader_lease_seconds,
        decide=EnforcerSettings(
            noisy_compute_share=s.enforce_noisy_compute_share,
            trigger_windows=s.enforce_trigger_windows,
            calm_windows=s.enforce_calm_windows,
        ),
    )


def evaluator_settings(s: ServerSettings, fleet: FleetReader) -> EvaluatorSettings:
    return EvaluatorSettings(
        interval_seconds=s.alert_evaluation_interval_seconds,
        # a reading is judged while it is as fresh as a node that is up, or two evaluations old
        fresh_seconds=max(fleet.node_down_after_seconds, 2 * s.alert_evaluation_interval_seconds),
        unseen_resolve_seconds=s.alert_unseen_resolve_seconds,
        lease_seconds=s.leader_lease_seconds,
        external_url=s.external_url,
    )


def delivery_settings(s: ServerSettings) -> DeliverySettings:
    return DeliverySettings(
        backoff_initial_seconds=s.webhook_backoff_initial_seconds,
        backoff_max_seconds=s.webhook_backoff_max_seconds,
        max_age_seconds=s.webhook_max_age_hours * 3600,
        claim_seconds=max(30.0, 3 * s.webhook_timeout_seconds),
    )
