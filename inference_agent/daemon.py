"""The node daemon: probes → sampler → spool → pusher, plus the agent's own endpoint; SIGTERM flushes and exits."""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry

from inference_agent.absences import NO_GPU_PROBE, metric_absences
from inference_agent.agent_token import AgentToken
from inference_agent.config import AgentConfig
from inference_agent.endpoint import AgentEndpoint
from inference_agent.probes.base import GpuInfo, GpuProbe, Probe, ProbeUnavailable
from inference_agent.probes.engines import EngineScrapeProbe
from inference_agent.pusher import MalformedDesired, Pusher, inventory_body
from inference_agent.rejected_batches import RejectedBatches
from inference_agent.sampler import Sampler
from inference_agent.serving.supervision.pools import DesiredRefused, RefusalReason, desired_refusal
from inference_agent.settings import AgentSettings
from inference_agent.spool import Spool
from inference_agent.stop_signals import stop_on_signals
from inference_agent.telemetry import AgentTelemetry
from inference_agent.ticker import Ticker
from wire.control import DesiredRefusal, DesiredState, NodeCapabilities, NodeReport

if TYPE_CHECKING:
    from inference_agent.kube.discovered_engines import DiscoveredEngines
    from inference_agent.serving.workload import ServingWorkload

log = logging.getLogger(__name__)
AGENT_VERSION = "0.1.0"
SPOOL_SEGMENT_SECONDS = 60.0


@dataclass
class Probes:
    """What the agent measures with: a GPU probe (or why there is none) and the node and engine probes."""

    gpu: GpuProbe | None
    gpu_absent_reason: str | None
    others: list[Probe] = field(default_factory=list)
    engines: list[EngineScrapeProbe] = field(default_factory=list)  # external engines read (also in ``others``)
    discovered: DiscoveredEngines | None = None  # the engines of this node's pods (also in ``others``)

    @property
    def inventory(self) -> list[GpuInfo]:
        return self.gpu.inventory() if self.gpu is not None else []

    def close(self) -> None:
        for probe in ([self.gpu] if self.gpu else []) + self.others:
            probe.close()


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        probes: Probes,
        *,
        config: AgentConfig | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self.settings = settings
        self.config = config or AgentConfig()
        self.probes = probes
        self.stop_event = threading.Event()
        self.registry = CollectorRegistry()
        self.telemetry = AgentTelemetry(self.registry)
        self.desired: DesiredState | None = None  # the last good one; None until one came
        self._refused: DesiredState | MalformedDesired | None = None  # the last one refused, so it is logged once
        self._refusal: DesiredRefusal | None = None  # why, told to the control plane until a state is taken
        self.spool = Spool(
            settings.spool_dir / "samples",
            segment_seconds=SPOOL_SEGMENT_SECONDS,
            max_segments=max(1, math.ceil(settings.spool_max_seconds / SPOOL_SEGMENT_SECONDS)),
        )
        self.telemetry.watch_spool(
            lambda: self.spool.pending, lambda: self.spool.lost_samples, lambda: self.spool.corrupt_segments
        )
        self._report_gpu_probe()
        for engine in probes.engines:
            self.telemetry.watch_engine(engine)
        if probes.discovered is not None:
            probes.discovered.report_absences(self.telemetry.watch_engine, self.telemetry.unwatch_engine)
        self.workload = self._serving_workload()
        self.client = httpx.Client(
            base_url=settings.collector, timeout=httpx.Timeout(10.0, connect=3.0), transport=transport
        )
        self.pusher = self._pusher()
        self.telemetry.watch_pusher(self.pusher.problem, self.pusher.since_progress_s)
        self.sampler = Sampler(
            self.spool,
            self.telemetry,
            gpu=probes.gpu,
            probes=probes.others,
            network_latency=self.pusher.network_latency,
        )
        self.endpoint = AgentEndpoint(
            settings.metrics_host, settings.metrics_port, self.registry, self.health, limits=settings.http_limits
        )
        self._last_tick = time.monotonic()

    def _pusher(self) -> Pusher:
        """What pushes the spool to the collector and hands each answer's desired state to ``_on_desired``."""
        settings = self.settings
        return Pusher(
            self.spool,
            self.client,
            self.telemetry,
            node_id=settings.node_id,
            token=AgentToken(settings.token, settings.token_file),
            inventory=inventory_body(socket.gethostname(), AGENT_VERSION, self.probes.inventory),
            on_desired=self._on_desired,
            report=self._report,
            max_batch=settings.push_max_samples,
            rejected=RejectedBatches(
                settings.spool_dir / "rejected",
                max_bytes=settings.spool_rejected_max_bytes,
                max_files=settings.spool_rejected_max_files,
            ),
            max_retry_after_s=settings.push_max_retry_after_seconds,
        )

    def _report_gpu_probe(self) -> None:
        reason = self._gpu_absent_reason()
        if self.probes.gpu is not None:
            self.telemetry.gpu_probe_up.set(1)
            self.telemetry.gpu_probe_info.labels(self.probes.gpu.name, "").set(1)
        elif reason is not None:
            self.telemetry.gpu_probe_up.set(0)
            self.telemetry.gpu_probe_info.labels("none", reason).set(1)
            log.warning("GPU metrics are absent on this node: %s", reason)

    def _serving_workload(self) -> ServingWorkload | None:
        """With ``--workload builtin`` or engine profiles in ``--config``: the replicas, their serving API, and the
        probes of their serving metrics."""
        if self.settings.workload_spec.kind != "builtin" and not self.config.profiles:
            return None
        from inference_agent.sampler import BackgroundProbe
        from inference_agent.serving.workload import ServingWorkload

        workload = ServingWorkload.from_settings(
            self.settings, self.registry, gpus=self.probes.inventory, config=self.config, watch=self.telemetry
        )
        for probe in workload.probes():
            self.probes.others.append(BackgroundProbe(probe, self.settings.sample_interval_seconds))
        return workload

    def _report(self, ts: float) -> NodeReport:
        """What the node runs now and what it can run. Without a supervisor (external engines only) it names no
        pools: the server counts each of its pool series as one ready replica."""
        report = self.workload.report(ts) if self.workload is not None else NodeReport(ts=ts)
        engines = self.workload.supervisor.offer.engines if self.workload is not None else {}
        capabilities = NodeCapabilities(engines=dict(engines), labels=self.config.labels)
        absent = metric_absences(self._gpu_absent_reason(), self.telemetry.watched_engines())
        return report.model_copy(update={"capabilities": capabilities, "refused": self._refusal, "absent": absent})

    def _gpu_absent_reason(self) -> str | None:
        """Why the GPU metrics are absent, as the log and ``fleetpilot_agent_gpu_probe_info`` say; None with a probe."""
        if self.probes.gpu is not None:
            return None
        return self.probes.gpu_absent_reason or NO_GPU_PROBE

    def _on_desired(self, desired: DesiredState | MalformedDesired) -> None:
        """Take the ingest answer's desired state, unless it is malformed or asks more than this node runs: then it
        is refused as a whole and the node keeps its last good one (``pools.py`` says why refusing beats trimming).
        It was parsed once, where the answer came in (``pusher.parse_ack``), and is checked against the node once:
        by the workload as it takes it, else here."""
        if isinstance(desired, MalformedDesired):
            self._refuse(desired, RefusalReason.MALFORMED, desired.detail)
            return
        try:
            self._take(desired)
        except DesiredRefused as exc:
            self._refuse(desired, exc.reason, str(exc))
            return
        self._refused = self._refusal = None
        if desired != self.desired:
            log.info("desired state from the control plane: %.2000s", desired)
        self.desired = desired

    def _take(self, desired: DesiredState) -> None:
        """Hand ``desired`` to the workload, or check it here without one; DesiredRefused leaves all as it was."""
        if self.workload is not None:
            self.workload.on_desired(desired)
            return
        refusal = desired_refusal(desired, self.settings.max_replicas)
        if refusal is not None:
            raise refusal

    def _refuse(self, desired: DesiredState | MalformedDesired, reason: RefusalReason, detail: str) -> None:
        if desired != self._refused:  # one line and one count per state, not one per push (1 a second)
            log.error("desired state refused (%s): %s; the node keeps its last good desired state", reason, detail)
            self.telemetry.desired_refused.labels(reason.value).inc()
        self._refused = desired
        self._refusal = DesiredRefusal(reason=reason.value, detail=detail[:2000])

    def health(self) -> dict[str, Any]:
        """``status`` ok (``/healthz`` 200), or stopping, or degraded with the ``reason`` (the pusher's)."""
        problem = self.pusher.problem()
        return {
            "status": "stopping" if self.stop_event.is_set() else "degraded" if problem else "ok",
            **({"reason": problem} if problem else {}),
            "node_id": self.settings.node_id,
            "spool_pending_samples": self.spool.pending,
            "gpu_probe": self.probes.gpu.name if self.probes.gpu else None,
            "gpu_absent_reason": self.probes.gpu_absent_reason,
            **({"pools": self.workload.status()} if self.workload is not None else {}),
        }

    def run(self) -> int:
        """Sample on this thread, push on another, until SIGTERM/SIGINT; then flush within the grace period."""
        stop_on_signals(self.stop_event)
        if self.workload is not None:
            self.workload.start()  # first: once /healthz answers, the serving port is bound too
        self.endpoint.start()
        pusher = threading.Thread(
            target=self.pusher.run,
            args=(self.stop_event,),
            kwargs={"interval_s": self.settings.push_interval_seconds},
            name="pusher",
        )
        pusher.start()
        log.info(
            "agent %s sampling every %.3g s, pushing to %s; metrics on port %d",
            self.settings.node_id,
            self.settings.sample_interval_seconds,
            self.settings.collector,
            self.endpoint.port,
        )
        try:
            self.sampler.run(Ticker(self.settings.sample_interval_seconds, stop=self.stop_event))
        finally:
            self.stop_event.set()
            if self.workload is not None:
                self.workload.stop(self.settings.replica_drain_seconds)  # in-flight requests finish first
            pusher.join(timeout=15)
            left = self.pusher.flush(self.settings.shutdown_flush_seconds)
            log.info("agent stopped; %d samples stay spooled for the next start", left)
            self.close()
        return 0

    def close(self) -> None:
        if self.workload is not None:
            self.workload.stop(0.0)
        self.endpoint.close()
        self.probes.close()
        self.client.close()


def open_probes(settings: AgentSettings, config: AgentConfig | None = None) -> Probes:
    """The probes the settings ask for; a GPU probe that cannot run leaves the GPU metrics absent, with the reason.
    Each engine the node reads (``--workload KIND=URL``, each ``--engine``, the config's ``engines``) gets its own."""
    from inference_agent.probes.host import HostProbe
    from inference_agent.sampler import BackgroundProbe

    gpu, reason = _open_gpu_probe(settings.gpu_probe)
    others: list[Probe] = [HostProbe(data_dir=settings.spool_dir)]
    engines = [
        EngineScrapeProbe(kind, url, pool) for pool, kind, url in read_engines(settings, config or AgentConfig())
    ]
    others += [BackgroundProbe(engine, settings.engine_scrape_interval_seconds) for engine in engines]
    discovered = None
    if settings.kubernetes_pods:
        discovered, gpu = _discover_pods(settings, config or AgentConfig(), gpu)
        others.append(discovered)
    return Probes(gpu, reason, others, engines, discovered)


def _discover_pods(
    settings: AgentSettings, config: AgentConfig, gpu: GpuProbe | None
) -> tuple[DiscoveredEngines, GpuProbe | None]:
    """``--kubernetes-pods``: the engines of the pods on node ``--node-id`` in the namespaces (and labels) read, and
    GPU rows naming their pods."""
    from inference_agent.kube.api_client import SERVICE_ACCOUNT_DIR, KubeApi
    from inference_agent.kube.discovery import discover_pods
    from inference_agent.kube.pod_scope import PodScope

    api = KubeApi.in_cluster()  # first: outside a pod, that is what to say
    scope = PodScope.of(
        namespaces=settings.kubernetes_pod_namespaces,
        selector=settings.kubernetes_pod_selector,
        host_network=settings.kubernetes_pods_host_network,
        account_dir=SERVICE_ACCOUNT_DIR,
    )
    return discover_pods(
        api,
        settings.node_id,
        gpu,
        scope=scope,
        pod_resources_socket=settings.pod_resources_socket,
        scrape_interval_s=settings.engine_scrape_interval_seconds,
        reserved_pools=[pool for pool, _, _ in read_engines(settings, config)],
    )


def read_engines(settings: AgentSettings, config: AgentConfig) -> list[tuple[str, str, str]]:
    """(pool, kind, url) of every engine the node reads; a pool named twice is a ValueError naming it."""
    engines = [(e.pool, e.kind, e.url) for e in settings.engine_endpoints]
    engines += [(e.pool, e.kind.value, e.url) for e in config.engines]
    spec = settings.workload_spec
    if spec.url is not None:
        engines.append((settings.pool or spec.kind, spec.kind, spec.url))
    pools = [pool for pool, _, _ in engines]
    twice = sorted({p for p in pools if pools.count(p) > 1})
    if twice:
        raise ValueError(f"pool {', '.join(twice)}: read from two engines (--engine, --workload, --config engines)")
    return engines


def _open_gpu_probe(choice: str) -> tuple[GpuProbe | None, str | None]:
    from inference_agent.probes.nvml import NvmlProbe
    from inference_agent.probes.replay import ReplayProbe

    if choice == "none":
        return None, "GPU probe disabled (--gpu-probe none)"
    if choice.startswith("replay:"):
        path, _, gpus = choice.removeprefix("replay:").partition(":")
        return ReplayProbe.from_file(path, gpus=int(gpus) if gpus else None), None
    try:
        return NvmlProbe.open(), None
    except ProbeUnavailable as exc:
        if choice == "nvml":
            raise
        return None, str(exc)
