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
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry

from inference_agent.config import AgentConfig
from inference_agent.isolation.cpu import CpuLimits
from inference_agent.isolation.mps import MpsControl
from inference_agent.probes.base import GpuInfo
from inference_agent.probes.builtin import BuiltinEngineProbe
from inference_agent.serving.frontend.server import Frontend, FrontendLimits
from inference_agent.serving.frontend.tenant_identity import GatewayTrust
from inference_agent.serving.reporting.engine_replicas import EngineReplicasProbe, EngineWatch
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
        *,
        usage_fresh_for_s: float = 5.0,
        engine_probe: EngineReplicasProbe | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.frontend = frontend
        self._probe = BuiltinEngineProbe(self._builtin_routes, queued=frontend.queued)
        self.engine_probe = engine_probe or EngineReplicasProbe(supervisor.routes, queued=frontend.queued)
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
        telemetry = ServingTelemetry(registry)
        device = settings.replica_device if settings.replica_device != "auto" else ("cuda" if gpus else "cpu")
        builtin = settings.workload_spec.kind == "builtin"
        http = replace(settings.http_limits, max_body_bytes=settings.serve_max_body_bytes)
        launcher = launcher or ProcessLauncher(
            settings.spool_dir / "replica-logs",
            engine=settings.replica_engine,
            device=device,
            http=http,
        )
        timing = Timing(
            drain_deadline_s=settings.replica_drain_seconds,
            startup_timeout_s=settings.replica_startup_timeout_seconds,
        )
        frontend_box: list[Frontend] = []
        mps = device.startswith("cuda") and mps_daemon_running(dict(os.environ), os.path.exists)
        supervisor = Supervisor(
            settings.pool_specs if builtin else {},
            launcher,
            telemetry,
            timing,
            device=device,
            mps=mps,
            load=lambda replica_id: frontend_box[0].dispatcher.in_flight(replica_id) if frontend_box else 0,
            cpu_limits=CpuLimits(settings.replica_cgroup_root, settings.replica_cgroup_v1_root),
            gpu_limits=MpsControl() if mps else None,
            max_replicas=settings.max_replicas,
            builtin=builtin,
            profiles=config.profiles if config is not None else {},
            gpu_memory_mib={g.index: _mib(g.memory_total_bytes) for g in gpus},
        )
        limits = FrontendLimits(
            settings.replica_max_in_flight,
            settings.serve_queue_limit,
            settings.serve_queue_timeout_seconds,
            settings.serve_max_body_bytes_in_flight,
        )
        # the front end ranks replicas by their engines' own queues, which the engine probe reads (and it counts
        # the front end's queue as waiting): each needs the other, hence the box
        engine_probe = EngineReplicasProbe(
            supervisor.routes, queued=lambda pool: frontend_box[0].queued(pool) if frontend_box else 0, watch=watch
        )
        frontend = Frontend(
            supervisor.routes,
            waiting=engine_probe.waiting,
            host=settings.serve_host,
            port=settings.serve_port,
            limits=limits,
            gateway=GatewayTrust.parse(settings.serve_tenant_header, settings.serve_trusted_gateways),
            telemetry=telemetry,
            connections=http,
        )
        frontend_box.append(frontend)
        for name, profile in supervisor.profiles.items():
            if not profile.takes_replica_key:
                log.warning(
                    "profile %s gives its engine no {replica_key}: any process on this host may call its "
                    'replicas, as any tenant (vLLM: env VLLM_API_KEY = "{replica_key}")',
                    name,
                )
        engines = ", ".join(supervisor.offer.engines) or "none"
        log.info(
            "serving engines %s: replicas on %s, serving API on %s:%d",
            engines,
            device,
            settings.serve_host,
            frontend.port,
        )
        # the probe's figures are as stale as the sampler lets them be (BackgroundProbe's bound), no more
        return cls(
            supervisor,
            frontend,
            usage_fresh_for_s=max(3 * settings.sample_interval_seconds, 5.0),
            engine_probe=engine_probe,
        )

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

    def check(self, desired: DesiredState) -> None:
        """DesiredRefused (``supervision/pools.py``) when the node cannot or may not run what ``desired`` asks."""
        self.supervisor.check(desired)

    def on_desired(self, desired: DesiredState) -> None:
        """Take the control plane's answer: pools and their limits to the supervisor, tenants and their key digests to
        the front end (an answer without ``tenants`` means none: every tenant gets the defaults)."""
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


def _mib(total_bytes: int | None) -> int | None:
    return None if total_bytes is None else total_bytes // 2**20
