"""The replicas the agent runs, as it runs them: the supervisor, the serving front end and the probes, wired together.

The daemon builds one with ``--workload builtin`` (the built-in engines) or a ``--config`` declaring engine profiles
(or both), starts it before sampling, checks each desired state from the ingest answers against what the node
offers (``check``), hands it on (pools to the supervisor, tenant quotas to the front end), asks it for the node's
pools at each push (``report``), and stops it on SIGTERM: the front end refuses new work, every replica drains, then
all stop. The built-in replicas are read through their ``/stats`` (with tenant usage), an engine profile's through
its own metrics endpoint and adapter (``reporting/engine_replicas.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry

from inference_agent.config import AgentConfig
from inference_agent.isolation.cpu import CpuLimits
from inference_agent.isolation.mps import MpsControl
from inference_agent.probes.base import GpuInfo
from inference_agent.probes.builtin import BuiltinEngineProbe
from inference_agent.serving.frontend.server import Frontend, FrontendLimits, dispatcher_for
from inference_agent.serving.frontend.tenant_identity import GatewayTrust
from inference_agent.serving.reporting.engine_replicas import EngineQueues, EngineReplicasProbe, EngineWatch
from inference_agent.serving.reporting.report import node_report
from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.routing import PoolRoutes
from inference_agent.serving.supervision.launcher import Launcher, ProcessLauncher
from inference_agent.serving.supervision.quota import mps_daemon_running
from inference_agent.serving.supervision.reconcile import Timing
from inference_agent.serving.supervision.supervisor import Supervisor
from inference_agent.settings import AgentSettings
from wire.control import DesiredState, NodeReport

log = logging.getLogger(__name__)


class ServingWorkload:
    def __init__(
        self,
        supervisor: Supervisor,
        frontend: Frontend,
        engine_probe: EngineReplicasProbe,
        *,
        usage_fresh_for_s: float = 5.0,
    ) -> None:
        self.supervisor = supervisor
        self.frontend = frontend
        self._probe = BuiltinEngineProbe(self._builtin_routes, queued=frontend.dispatcher.queued)
        self.engine_probe = engine_probe
        self._usage_fresh_for_s = usage_fresh_for_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=supervisor.run, args=(self._stop,), name="supervisor", daemon=True)
        self._stopped = False

    @classmethod
    def from_settings(
        cls,
        settings: AgentSettings,
        registry: CollectorRegistry,
        *,
        gpus: list[GpuInfo],
        config: AgentConfig | None = None,
        launcher: Launcher | None = None,
        watch: EngineWatch | None = None,
    ) -> ServingWorkload:
        """The parts in the order each needs the last: the engines' queues (as the engine probe reads them) and the
        front end's replica slots (``dispatch.py``, which rank replicas by those queues) first, then the supervisor
        (which counts a replica's requests in flight from those slots), the engine probe over the supervisor's
        routes (which counts the slots' queue as waiting), and the front end over both."""
        telemetry = ServingTelemetry(registry)
        device = _replica_device(settings.replica_device, gpus)
        http = replace(settings.http_limits, max_body_bytes=settings.serve_max_body_bytes)
        limits = _frontend_limits(settings)
        queues = EngineQueues()
        dispatcher = dispatcher_for(limits, waiting=queues.waiting)
        launcher = launcher or ProcessLauncher(
            settings.spool_dir / "replica-logs", engine=settings.replica_engine, device=device, http=http
        )
        supervisor = _supervisor(settings, launcher, telemetry, device, dispatcher.in_flight, config, gpus)
        engine_probe = EngineReplicasProbe(supervisor.routes, queued=dispatcher.queued, queues=queues, watch=watch)
        frontend = Frontend(
            supervisor.routes,
            dispatcher=dispatcher,
            host=settings.serve_host,
            port=settings.serve_port,
            limits=limits,
            gateway=GatewayTrust.parse(settings.serve_tenant_header, settings.serve_trusted_gateways),
            telemetry=telemetry,
            connections=http,
        )
        _log_serving(supervisor, device, settings.serve_host, frontend.port)
        # the probe's figures are as stale as the sampler lets them be (BackgroundProbe's bound), no more
        usage_fresh_for_s = max(3 * settings.sample_interval_seconds, 5.0)
        return cls(supervisor, frontend, engine_probe, usage_fresh_for_s=usage_fresh_for_s)

    def probes(self) -> list[BuiltinEngineProbe | EngineReplicasProbe]:
        """What reads the replicas' serving metrics: the built-in ones' ``/stats``, the engine profiles' endpoints."""
        return [self._probe, self.engine_probe]

    def _builtin_routes(self) -> dict[str, PoolRoutes]:
        return {name: r for name, r in self.supervisor.routes().items() if r.engine is None}

    def report(self, ts: float) -> NodeReport:
        """The node's replicas and tenant usage now, as of the wall-clock ``ts``."""
        counts = self.supervisor.replica_counts()
        return node_report(ts, counts, self._probe.tenant_usage(self._usage_fresh_for_s))

    def start(self) -> None:
        self.frontend.start()
        self.supervisor.step()
        self._thread.start()

    def on_desired(self, desired: DesiredState) -> None:
        """Take the control plane's answer: pools and their limits to the supervisor, tenants and their key digests to
        the front end (an answer without ``tenants`` means none: every tenant gets the defaults). One the node cannot
        or may not run is DesiredRefused (``supervision/pools.py``) before either changes."""
        self.supervisor.set_desired(desired)
        self.frontend.apply_desired(desired)

    def status(self) -> dict[str, Any]:
        return {
            name: {"kind": r.kind, "engine": r.engine, "ready": len(r.ready), "starting": r.starting}
            for name, r in self.supervisor.routes().items()
        }

    def stop(self, deadline_s: float) -> None:
        """Refuse new requests, drain every replica up to ``deadline_s``, stop them; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self.frontend.draining = True
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.supervisor.shutdown(deadline_s)
        self.frontend.close()


def _replica_device(setting: str, gpus: list[GpuInfo]) -> str:
    """``--replica-device``, where ``auto`` is CUDA on a node with GPUs and the CPU on one without."""
    if setting != "auto":
        return setting
    return "cuda" if gpus else "cpu"


def _supervisor(
    settings: AgentSettings,
    launcher: Launcher,
    telemetry: ServingTelemetry,
    device: str,
    load: Callable[[str], int],
    config: AgentConfig | None,
    gpus: list[GpuInfo],
) -> Supervisor:
    """The supervisor of the node's replicas; ``load``: a replica's requests in flight from the front end."""
    builtin = settings.workload_spec.kind == "builtin"
    mps = device.startswith("cuda") and mps_daemon_running(dict(os.environ), os.path.exists)
    timing = Timing(
        drain_deadline_s=settings.replica_drain_seconds,
        startup_timeout_s=settings.replica_startup_timeout_seconds,
    )
    return Supervisor(
        settings.pool_specs if builtin else {},
        launcher,
        telemetry,
        timing,
        device=device,
        mps=mps,
        load=load,
        cpu_limits=CpuLimits(settings.replica_cgroup_root, settings.replica_cgroup_v1_root),
        gpu_limits=MpsControl() if mps else None,
        max_replicas=settings.max_replicas,
        builtin=builtin,
        profiles=config.profiles if config is not None else {},
        gpu_memory_mib={g.index: _mib(g.memory_total_bytes) for g in gpus},
    )


def _frontend_limits(settings: AgentSettings) -> FrontendLimits:
    return FrontendLimits(
        settings.replica_max_in_flight,
        settings.serve_queue_limit,
        settings.serve_queue_timeout_seconds,
        settings.serve_max_body_bytes_in_flight,
    )


def _log_serving(supervisor: Supervisor, device: str, host: str, port: int) -> None:
    """What the node serves, where, and each profile whose replicas any process on the host may call."""
    for name, profile in supervisor.profiles.items():
        if not profile.takes_replica_key:
            log.warning(
                "profile %s gives its engine no {replica_key}: any process on this host may call its "
                'replicas, as any tenant (vLLM: env VLLM_API_KEY = "{replica_key}")',
                name,
            )
    engines = ", ".join(supervisor.offer.engines) or "none"
    log.info("serving engines %s: replicas on %s, serving API on %s:%d", engines, device, host, port)


def _mib(total_bytes: int | None) -> int | None:
    return None if total_bytes is None else total_bytes // 2**20
