"""The built-in workload as the agent runs it: the supervisor, the serving front end and the probe, wired together.

The daemon builds one with ``--workload builtin``, starts it before sampling, hands it each ``desired`` state from
the ingest answers (pools to the supervisor, tenant quotas to the front end), and stops it on SIGTERM: the front
end refuses new work, every replica drains, then all stop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from inference_agent.http_server import ConnectionLimits
from inference_agent.isolation.cpu import CpuLimits
from inference_agent.isolation.mps import MpsControl
from inference_agent.probes.builtin import BuiltinEngineProbe
from inference_agent.serving.frontend import Frontend, FrontendLimits
from inference_agent.serving.launcher import Launcher, ProcessLauncher
from inference_agent.serving.reconcile import Timing
from inference_agent.serving.replica_quota import mps_daemon_running
from inference_agent.serving.supervisor import Supervisor
from inference_agent.serving.telemetry import ServingTelemetry
from inference_agent.serving.tenant_identity import GatewayTrust
from inference_agent.settings import AgentSettings

log = logging.getLogger(__name__)


class BuiltinWorkload:
    def __init__(self, supervisor: Supervisor, frontend: Frontend) -> None:
        self.supervisor = supervisor
        self.frontend = frontend
        self._stop = threading.Event()
        self._thread = threading.Thread(target=supervisor.run, args=(self._stop,), name="supervisor", daemon=True)
        self._stopped = False

    @classmethod
    def from_settings(
        cls, settings: AgentSettings, registry: CollectorRegistry, *, gpus: int, launcher: Launcher | None = None
    ) -> BuiltinWorkload:
        telemetry = ServingTelemetry(registry)
        device = settings.replica_device if settings.replica_device != "auto" else ("cuda" if gpus else "cpu")
        http = ConnectionLimits(settings.http_max_connections, settings.http_socket_timeout_seconds)
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
            settings.pool_specs,
            launcher,
            telemetry,
            timing,
            device=device,
            mps=mps,
            load=lambda replica_id: frontend_box[0].dispatcher.in_flight(replica_id) if frontend_box else 0,
            cpu_limits=CpuLimits(settings.replica_cgroup_root, settings.replica_cgroup_v1_root),
            gpu_limits=MpsControl() if mps else None,
            max_replicas=settings.max_replicas,
        )
        limits = FrontendLimits(
            settings.replica_max_in_flight, settings.serve_queue_limit, settings.serve_queue_timeout_seconds
        )
        frontend = Frontend(
            supervisor.routes,
            host=settings.serve_host,
            port=settings.serve_port,
            limits=limits,
            gateway=GatewayTrust.parse(settings.serve_tenant_header, settings.serve_trusted_gateways),
            telemetry=telemetry,
            connections=http,
        )
        frontend_box.append(frontend)
        log.info("built-in workload: replicas on %s, serving API on %s:%d", device, settings.serve_host, frontend.port)
        return cls(supervisor, frontend)

    def probe(self) -> BuiltinEngineProbe:
        return BuiltinEngineProbe(self.supervisor.routes, queued=self.frontend.queued)

    def start(self) -> None:
        self.frontend.start()
        self.supervisor.step()
        self._thread.start()

    def on_desired(self, desired: Mapping[str, Any]) -> None:
        """Take the control plane's answer: pools and their limits to the supervisor, tenants and their key digests to
        the front end (an answer without ``tenants`` means none: every tenant gets the defaults)."""
        self.supervisor.set_desired(desired)
        try:
            self.frontend.apply_desired(desired)
        except ValueError as exc:
            log.error("tenant quotas in the desired state ignored: %s", exc)

    def status(self) -> dict[str, Any]:
        return {
            name: {"kind": r.kind, "ready": len(r.ready), "starting": r.starting}
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
