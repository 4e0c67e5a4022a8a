"""Composition of the server deployable: storage, services, the web app and the background jobs."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import re
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, multiprocess
from sqlalchemy import Engine

from alerting.rule_store import RuleStore
from alerting.telemetry import AlertingTelemetry
from autoscaler.actuators.base import Actuator
from autoscaler.actuators.local import LocalActuator
from autoscaler.controller import AutoscalerTelemetry
from autoscaler.keda.scaler import KedaScaler, KedaServer
from autoscaler.keda.tls import KedaTls
from autoscaler.scaling_events import EventStore
from collector.database import make_engine
from collector.exposition import FleetCollector, FleetSnapshot
from collector.ingest import SampleWriter
from collector.minute_rollups import MinuteRollups
from collector.registry import read_latest
from collector.remote.mapping import load_mapping
from collector.remote.receiver import ReceiverLimits, RemoteWriter
from collector.remote.staging import Dropped
from collector.telemetry import IngestTelemetry, RemoteTelemetry
from fleet.desired.board import DesiredBoard
from fleet.pools import PoolStore
from fleet.view import FleetReader
from fleetpilot.logs import configure_logging
from fleetpilot.settings import ActuatorKind, ServerSettings
from isolation.desired import TenantsPublisher
from isolation.enforcer import EnforcerTelemetry
from isolation.events import EnforcementStore
from migrations import runner
from predictor.store import ForecastStore
from predictor.telemetry import ForecastTelemetry
from web.app import create_app
from web.kube_tokens import KubeTokenVerifier
from web.services import AppServices
from web.tokens import Role, TokenStore

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
METRICS_FOLDER_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's: where each worker keeps its metrics


def build_actuator(settings: ServerSettings, engine: Engine, board: DesiredBoard) -> Actuator:
    if settings.actuator is ActuatorKind.KUBERNETES:
        from autoscaler.actuators.kubernetes import KubernetesActuator  # the kubernetes client only where used

        return KubernetesActuator.from_config(settings.kubernetes_namespace)
    return LocalActuator(engine, board=board)


def build_kube_tokens(settings: ServerSettings) -> KubeTokenVerifier | None:
    """The verifier of agents' projected ServiceAccount tokens, with ``kubernetes_agent_auth`` only."""
    if not settings.kubernetes_agent_auth:
        return None
    return KubeTokenVerifier.from_config(
        audience=settings.kubernetes_token_audience,
        service_accounts=settings.kubernetes_agent_service_accounts,
        cache_seconds=settings.kubernetes_token_cache_seconds,
        max_concurrent_reviews=settings.kubernetes_token_max_concurrent_reviews,
        cache_max_tokens=settings.kubernetes_token_cache_max_tokens,
    )


def build_services(settings: ServerSettings, engine: Engine | None = None) -> AppServices:
    engine = engine or make_engine(settings.database_url)
    registry = CollectorRegistry()
    minute_rollups = MinuteRollups(f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    board = DesiredBoard(engine)
    actuator = build_actuator(settings, engine, board)
    services = AppServices(
        settings=settings,
        engine=engine,
        tokens=TokenStore(engine, cache_seconds=settings.token_cache_seconds),
        writer=SampleWriter(
            engine,
            late_after_seconds=settings.rollup_lookback_seconds,
            deadline_seconds=settings.ingest_commit_deadline_seconds,
            rollups=minute_rollups,
        ),
        remote=RemoteWriter(
            engine,
            load_mapping(settings.remote_write_mapping),
            limits=ReceiverLimits(
                max_series_per_request=settings.remote_write_max_series_per_request,
                max_future_seconds=settings.ingest_max_future_seconds,
                window_seconds=settings.remote_write_window_seconds,
                max_gap_seconds=settings.remote_write_max_gap_seconds,
                max_samples_per_request=settings.remote_write_max_samples_per_request,
                max_labels_per_request=settings.remote_write_max_labels_per_request,
                max_label_bytes=settings.remote_write_max_label_bytes,
                max_nodes_per_token=settings.remote_write_max_nodes_per_token,
                idle_series_seconds=settings.remote_write_idle_series_seconds,
            ),
        ),
        registry=registry,
        telemetry=IngestTelemetry(registry),
        remote_telemetry=RemoteTelemetry(registry, tuple(d.value for d in Dropped)),
        pools=PoolStore(engine),
        forecasts=ForecastStore(engine),
        forecast_telemetry=ForecastTelemetry(registry),
        events=EventStore(engine),
        actuator=actuator,
        autoscaler_telemetry=AutoscalerTelemetry(registry),
        enforcement=EnforcementStore(engine),
        enforcer_telemetry=EnforcerTelemetry(registry),
        alerting_telemetry=AlertingTelemetry(registry),
        fleet=FleetReader(
            engine,
            node_down_after_seconds=settings.node_down_after_seconds,
            cpu_replicas_per_node=settings.cpu_replicas_per_node,
        ),
        desired=board,
        kube_tokens=build_kube_tokens(settings),
        minute_rollups=minute_rollups,
    )

    tenants = TenantsPublisher(services.fleet, board)
    services.publish_tenants = lambda: tenants.publish(services.clock())  # the services' clock at each call
    services.exposition = exposition_registry(registry)
    services.exposition.register(FleetCollector(lambda: fleet_snapshot(services)))
    return services


def exposition_registry(registry: CollectorRegistry) -> CollectorRegistry:
    """What ``/metrics`` answers. One process: its own ``registry``. ``--workers N`` (``PROMETHEUS_MULTIPROC_DIR``
    set by the supervisor): every worker's counters and histograms summed and each gauge's most recent value
    (``prometheus_client.multiprocess``), whichever worker the scrape reaches — per process, counters would jump
    between workers from scrape to scrape. Gauges left by workers that died are dropped first."""
    folder = os.environ.get(METRICS_FOLDER_VARIABLE)
    if not folder:
        return registry
    for pid in _dead_writers(Path(folder)):
        multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]
    summed = CollectorRegistry()
    multiprocess.MultiProcessCollector(summed, path=folder)  # type: ignore[no-untyped-call]
    return summed


def _dead_writers(folder: Path) -> set[int]:
    """Pids of the processes whose metric files are in ``folder`` and that no longer run."""
    pids = {int(m[1]) for f in folder.glob("*.db") if (m := re.search(r"_(\d+)\.db$", f.name))}
    return {pid for pid in pids if not _running(pid)}


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: it runs
        return True
    return True


def fleet_snapshot(services: AppServices) -> FleetSnapshot:
    with services.engine.connect() as conn:
        return FleetSnapshot(
            series=read_latest(conn),
            node_status=services.fleet.statuses(conn, services.clock()),
        )


def prepare_database(settings: ServerSettings) -> None:
    """Migrate SQLite on start (one process owns it); PostgreSQL is migrated by ``fleetpilot db upgrade``."""
    if settings.database_url.startswith("sqlite"):
        runner.upgrade(settings.database_url)


def bootstrap_admin(services: AppServices, admin_token: str | None) -> str | None:
    """On a first start, create the admin token; return it to print once only when it was generated here. One given
    in ``admin_token`` (``FLEETPILOT_ADMIN_TOKEN``, from a secret store) is installed and never printed: whoever
    set it knows it, and a log is no place for it."""
    if services.tokens.has_admin():
        return None
    given = admin_token
    info, clear = services.tokens.create(Role.ADMIN, now=time.time(), name="bootstrap-admin", secret=given)
    if given is not None:
        log.warning("first start: installed the admin token from FLEETPILOT_ADMIN_TOKEN as token %s", info.id)
        return None
    return clear


def seed_alert_rules(services: AppServices) -> None:
    """The default alert rule pack, on the first start only (a restart or a second server seeds nothing)."""
    seeded = RuleStore(services.engine).seed_defaults(now=services.clock())
    if seeded:
        log.info("alerting: seeded the %d default alert rules", seeded)


@contextmanager
def keda_scaler(services: AppServices, settings: ServerSettings) -> Iterator[KedaServer | None]:
    """KEDA's external scaler on ``keda_port`` while the block runs (None when unset), stopped after it. It runs in
    the process that starts the server, the supervisor under ``--workers N``, never in a worker: one process holds
    the port and each pool's fallback state (a ForecastStale event per transition, not one per worker), and it
    reads the database the workers write, as each of them would."""
    if settings.keda_port is None:
        yield None
        return
    scaler = KedaScaler(
        pools=services.pools,
        fleet=services.fleet,
        forecasts=services.forecasts,
        events=services.events,
        forecast_stale_after_seconds=settings.forecast_stale_after_seconds,
        poll_seconds=settings.autoscale_interval_seconds,
        max_streams=settings.keda_max_streams,
        clock=services.clock,
    )
    tls = keda_tls(settings)
    server = KedaServer(scaler, settings.host, settings.keda_port, tls=tls)
    secured = "TLS, client certificates required" if tls is not None else "plain text"
    print(f"KEDA external scaler (gRPC, {secured}) on {settings.host}:{server.port}", flush=True)
    try:
        yield server
    finally:
        server.stop()


def keda_tls(settings: ServerSettings) -> KedaTls | None:
    """The KEDA port's TLS when the settings name its files (they name all three or none)."""
    cert, key, client_ca = settings.keda_tls_cert_file, settings.keda_tls_key_file, settings.keda_tls_client_ca_file
    if cert is None or key is None or client_ca is None:
        return None
    return KedaTls(cert, key, client_ca)


def server_app(services: AppServices, settings: ServerSettings, keda: KedaServer | None = None) -> FastAPI:
    """The app with its jobs; ``keda`` (one process only) stops with it: uvicorn re-raises the SIGTERM it caught once
    it has shut down, so nothing after ``uvicorn.run`` would run."""
    from fleetpilot.jobs import start_jobs  # APScheduler only where jobs run

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        seed_alert_rules(services)
        jobs = start_jobs(services, settings)
        try:
            yield
        finally:
            jobs.shutdown()
            if keda is not None:
                keda.stop()
            services.engine.dispose()

    return create_app(services, lifespan=lifespan)


def worker_app() -> FastAPI:
    """One of ``fleetpilot server --workers N``'s processes (uvicorn calls this in each): its settings from the
    environment the parent exported, its own services and jobs (the leases keep each job to one process)."""
    _die_with_supervisor()
    configure_logging()
    settings = ServerSettings()
    return server_app(build_services(settings), settings)


def _die_with_supervisor() -> None:
    """Linux: the kernel SIGKILLs this worker when the supervisor dies. A supervisor SIGKILLed (the OOM killer, a
    fault test) otherwise leaves its workers answering on the port and holding the jobs' leases, unsupervised."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    supervisor = multiprocessing.parent_process()
    if supervisor is not None and os.getppid() != supervisor.pid:  # it died before the prctl took
        os._exit(1)
