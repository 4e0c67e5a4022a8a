"""The replica supervisor: runs each pool's replica processes and reconciles them toward the target.

The target is the agent's ``--pools`` until the control plane's ``desired`` names pools, with the limits of its
``pool_limits`` (shapes in ``pools.py``). A replica runs the built-in engine (``python -m
inference_agent.serving.replica``: ready on ``/healthz``, drained with ``POST /drain``) or an engine profile of the
node's config (its own command, ready on its health path, drained by routing nothing new to it until what the front end
sent it has finished or the profile's drain grace ends); either way it is SIGTERMed, then SIGKILLed ``STOP_GRACE_S``
later, keeps its log, and is restarted with back-off when it crashes. A pool asking ``gpus`` per replica gets that many
of the node's GPUs to itself (``CUDA_VISIBLE_DEVICES``): a replica waits to start until they are free. Each pass
observes (process exits, warm ``/healthz``, in-flight counts), asks ``reconcile.decide`` what to do, and does it (the
processes' side in ``processes.py``): start replicas on free loopback ports with their quota environment (``quota.py``)
and a key of their own (``replica/key.py``), route to them once warm, drain on scale-down (``POST /drain``, then SIGTERM
when nothing is in flight or the drain deadline passed), restart crashed ones after their back-off. A pool's CPU cap
applies to each of its replicas right after its process starts, and changes in place on running ones
(``isolation/cpu.py``); the cap's cgroup goes with the process. Under MPS the GPU limits travel in the replica's
environment, the MPS server is made to allow them once the process runs (``isolation/mps.py``), and new GPU limits
replace the replicas (``reconcile``).
``routes()`` is what the front end and the builtin probe read; ``replica_counts()`` what the node's report says of
each pool, with each pool's measured startup time: from its latest replica's launch to its first warm ``/healthz``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from inference_agent.config import EngineProfile
from inference_agent.isolation.cpu import CpuLimits
from inference_agent.isolation.limits import LimitApplier
from inference_agent.serving.replica.key import bearer_headers
from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.routing import Endpoint, PoolRoutes
from inference_agent.serving.supervision.gpu_slots import GpuSlots
from inference_agent.serving.supervision.launcher import Launcher
from inference_agent.serving.supervision.pools import (
    BUILTIN_OFFERS,
    MAX_REPLICAS_PER_NODE,
    NodeOffer,
    PoolSpec,
    pools_from_desired,
    with_limits,
)
from inference_agent.serving.supervision.processes import STOP_GRACE_S, Replica, ReplicaProcesses
from inference_agent.serving.supervision.quota import GpuQuota
from inference_agent.serving.supervision.reconcile import (
    Action,
    Phase,
    ReplicaView,
    Timing,
    Verb,
    crashed,
    decide,
    settled,
)
from wire.control import DesiredState, EngineOffer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaCounts:
    """A pool's replicas by phase as the supervisor sees them (a replica in crash back-off is none of them), the most
    consecutive crashes among them, and the latest replica's launch → ready in seconds (None until one was ready)."""

    ready: int = 0
    starting: int = 0
    draining: int = 0
    consecutive_crashes: int = 0
    startup_seconds: float | None = None


@dataclass
class Supervisor:
    configured: Mapping[str, PoolSpec]
    launcher: Launcher
    telemetry: ServingTelemetry | None = None
    timing: Timing = field(default_factory=Timing)
    device: str = "cpu"
    mps: bool = False
    cpus: tuple[int, ...] = field(default_factory=lambda: tuple(sorted(os.sched_getaffinity(0))))
    load: Callable[[str], int] = lambda _replica_id: 0
    cpu_limits: LimitApplier = field(default_factory=CpuLimits)
    gpu_limits: LimitApplier | None = None  # MpsControl where an MPS daemon serves the replicas
    clock: Callable[[], float] = time.monotonic
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=httpx.Timeout(2.0, connect=0.5)))
    max_replicas: int = MAX_REPLICAS_PER_NODE  # in all pools together, whatever a desired state asks
    # what a desired state may name: the built-in engines (when the node runs them) and the config's profiles
    builtin: bool = True
    profiles: Mapping[str, EngineProfile] = field(default_factory=dict)
    gpu_memory_mib: Mapping[int, int | None] = field(default_factory=dict)  # the node's GPUs: index → total MiB

    def __post_init__(self) -> None:
        configured = sum(spec.replicas for spec in self.configured.values())
        if configured > self.max_replicas:
            raise ValueError(f"pools: {configured} replicas in all, this node runs at most {self.max_replicas}")
        self._pools: dict[str, PoolSpec] = dict(self.configured)
        self._target: dict[str, PoolSpec] = dict(self.configured)
        self._replicas: list[Replica] = []
        self._routes: dict[str, PoolRoutes] = {}
        self._counts: dict[str, ReplicaCounts] = {}
        self._startup_s: dict[str, float] = {}  # by pool: the latest replica's launch → ready
        self._step_lock = threading.Lock()
        self._next_id = 0
        self._processes = ReplicaProcesses(
            self.launcher,
            GpuSlots(self.gpu_memory_mib),
            cpus=self.cpus,
            device=self.device,
            mps=self.mps,
            cpu_limits=self.cpu_limits,
            gpu_limits=self.gpu_limits,
        )
        self._publish()

    @property
    def offer(self) -> NodeOffer:
        """What a desired state is checked against (``pools.pools_from_desired``) and what the node reports."""
        engines: dict[str, EngineOffer] = dict(BUILTIN_OFFERS) if self.builtin else {}
        engines.update({name: profile.offer() for name, profile in self.profiles.items()})
        return NodeOffer(engines, len(self._processes.gpus), self.max_replicas)

    # ---- what others read and set
    def routes(self) -> dict[str, PoolRoutes]:
        return self._routes

    def replica_counts(self) -> dict[str, ReplicaCounts]:
        """Every pool the node targets or still has replicas of (a removed pool's draining ones)."""
        return self._counts

    def target(self) -> dict[str, PoolSpec]:
        return dict(self._target)

    def set_desired(self, desired: DesiredState) -> None:
        """Take the control plane's pools and limits; one the node cannot or may not run is refused as a whole:
        DesiredRefused, and the target kept."""
        pools = pools_from_desired(desired, self._pools, self.offer)
        target = with_limits(self._pools if pools is None else pools, desired.pool_limits, len(self.cpus))
        if target != self._target:
            log.info("target pools now %s", {name: (p.kind, p.replicas) for name, p in target.items()})
            self._pools = self._pools if pools is None else pools
            self._target = target
            self._publish()

    # ---- the loop
    def run(self, stop: threading.Event, interval_s: float = 0.25) -> None:
        while not stop.wait(interval_s):
            try:
                self.step()
            except Exception:  # one bad pass must not end supervision
                log.exception("supervisor pass failed")

    def step(self) -> list[Action]:
        with self._step_lock:
            now = self.clock()
            self._observe(now)
            views = [r.view for r in self._replicas]
            actions = decide(self._decided_target(), views, now, self.timing, self._timings())
            for action in actions:
                self._apply(action, now)
            for replica in self._replicas:
                spec = self._target.get(replica.view.pool)
                if spec is not None:
                    self._processes.limit(replica, spec.cpu_millicores)
            self._processes.reap(now, self._runs)
            self._publish()
            return actions

    def _timings(self) -> dict[str, Timing]:
        """Each engine-profile pool's own startup timeout and drain grace."""
        timings = {}
        for name, spec in self._target.items():
            profile = self.profiles.get(spec.engine) if spec.engine else None
            if profile is not None:
                timings[name] = replace(
                    self.timing,
                    startup_timeout_s=profile.startup_timeout_seconds,
                    drain_deadline_s=profile.drain_grace_seconds,
                )
        return timings

    def _decided_target(self) -> dict[str, PoolSpec]:
        """The target as it binds the replicas: GPU limits only where MPS would read them."""
        if self.mps:
            return self._target
        return {name: replace(spec, gpu_quota=GpuQuota()) for name, spec in self._target.items()}

    def shutdown(self, deadline_s: float) -> None:
        """Drain every replica (up to ``deadline_s``), then stop them all and reap them."""
        self._target = {}
        end = self.clock() + deadline_s
        while self._replicas and self.clock() < end:
            self.step()
            time.sleep(0.05)
        with self._step_lock:
            for replica in self._replicas:
                self._processes.terminate(replica, self.clock())
            self._replicas = []
            self._processes.reap_all(end + STOP_GRACE_S, self.clock)
            self._publish()
        self.client.close()

    # ---- observing
    def _observe(self, now: float) -> None:
        for replica in self._replicas:
            view = replica.view
            if replica.process is not None and replica.process.poll() is not None:
                self._exited(replica, now)
            elif view.phase is Phase.STARTING and self._answers(replica, _health_path(replica)):
                replica.view = replace(view, phase=Phase.READY, since=now)
                self._warm(replica, now - view.since)  # ``since``: when its process was launched
            elif view.phase is Phase.READY:
                replica.view = settled(replace(view, in_flight=self.load(view.id)), now, self.timing)
            elif view.phase is Phase.DRAINING and replica.profile is not None:
                replica.view = replace(view, in_flight=self.load(view.id))  # only the front end routes to it
            elif view.phase is Phase.DRAINING:
                stats = self._get(replica, "/stats")
                if stats is not None:
                    replica.view = replace(view, in_flight=int(stats["requests"]["in_flight"]))
        self._replicas = [r for r in self._replicas if r.view.phase is not Phase.DRAINING or r.process is not None]

    def _warm(self, replica: Replica, startup_s: float) -> None:
        pool = replica.view.pool
        self._startup_s[pool] = startup_s
        if self.telemetry is not None:
            self.telemetry.replica_startup.labels(pool).set(startup_s)
        log.info("replica %s of pool %s warm on port %d after %.1f s", replica.view.id, pool, replica.port, startup_s)

    def _exited(self, replica: Replica, now: float) -> None:
        code = replica.process.poll() if replica.process is not None else None
        replica.process = None
        self._processes.release(replica.view.id)
        if replica.view.phase is Phase.DRAINING:
            return  # it finished on its own; dropped by the caller
        replica.view = crashed(replica.view, now, self.timing)
        if self.telemetry is not None:
            self.telemetry.replica_crashes.labels(replica.view.pool).inc()
        log.error(
            "replica %s of pool %s exited with %s (crash %d; restart in %.0f s); its log ends:\n%s",
            replica.view.id,
            replica.view.pool,
            code,
            replica.view.crashes,
            (replica.view.restart_at or now) - now,
            self.launcher.log_tail(replica.view.id),
        )

    def _answers(self, replica: Replica, path: str) -> bool:
        try:
            return self.client.get(f"http://127.0.0.1:{replica.port}{path}").status_code == 200
        except httpx.HTTPError:
            return False

    def _get(self, replica: Replica, path: str) -> dict[str, Any] | None:
        try:
            answer = self.client.get(f"http://127.0.0.1:{replica.port}{path}")
            body: dict[str, Any] = answer.json()
            return body if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    # ---- acting
    def _apply(self, action: Action, now: float) -> None:
        if self.telemetry is not None:
            self.telemetry.replica_actions.labels(action.verb.value, action.reason.value).inc()
        if action.verb is Verb.START:
            view = ReplicaView(f"{action.pool}-{self._next_id + 1}", action.pool, action.kind, Phase.STARTING, now)
            replica = Replica(view, self._free_slot())
            if self._spawn(replica, now):
                self._next_id += 1
                self._replicas.append(replica)
            return
        replica = next(r for r in self._replicas if r.view.id == action.replica_id)
        log.info("replica %s of pool %s: %s (%s)", replica.view.id, action.pool, action.verb, action.reason)
        if action.verb is Verb.RESTART:
            if not self._spawn(replica, now):
                replica.view = replace(replica.view, restart_at=now + self.timing.backoff_base_s)
        elif action.verb is Verb.DRAIN:
            replica.view = replace(replica.view, phase=Phase.DRAINING, since=now)
            self._publish()  # stop routing to it before it refuses work
            if replica.profile is not None:
                return  # an engine of its own knows no drain: what it has finishes, nothing new reaches it
            try:
                self.client.post(f"http://127.0.0.1:{replica.port}/drain", headers=bearer_headers(replica.key))
            except httpx.HTTPError as exc:
                log.warning("replica %s did not take the drain: %s", replica.view.id, exc)
        elif action.verb is Verb.STOP:
            self._processes.terminate(replica, now)
            self._replicas.remove(replica)
        elif action.verb is Verb.FAIL:
            self._processes.terminate(replica, now)
            replica.view = crashed(replica.view, now, self.timing)
            if self.telemetry is not None:
                self.telemetry.replica_crashes.labels(replica.view.pool).inc()
        elif action.verb is Verb.FORGET:
            self._replicas.remove(replica)

    def _spawn(self, replica: Replica, now: float) -> bool:
        """Start the replica's process; False (nothing started) while the GPUs it needs are held by others."""
        view = replica.view
        spec = self._decided_target().get(view.pool, PoolSpec(0, view.kind))
        slots = max(sum(p.replicas for p in self._target.values()), len(self._replicas))
        profile = self.profiles.get(spec.engine) if spec.engine else None
        return self._processes.start(replica, spec, profile, slots, now)

    def _free_slot(self) -> int:
        used = {r.slot for r in self._replicas}
        return next(i for i in range(len(used) + 1) if i not in used)

    def _runs(self, replica_id: str) -> bool:
        """Whether the replica has a process now (a restarted one keeps what its stopped process held)."""
        return any(r.view.id == replica_id and r.process is not None for r in self._replicas)

    def _publish(self) -> None:
        routes: dict[str, PoolRoutes] = {}
        for name, spec in self._target.items():
            mine = [r for r in self._replicas if r.view.pool == name and r.view.kind == spec.runs]
            ready = tuple(Endpoint(r.view.id, r.port, key=r.key) for r in mine if r.view.phase is Phase.READY)
            starting = sum(r.view.phase is Phase.STARTING for r in mine)
            profile = self.profiles.get(spec.engine) if spec.engine else None
            routes[name] = PoolRoutes(
                spec.kind,
                ready,
                starting,
                max((r.view.crashes for r in mine), default=0),
                served_model=spec.model if profile is not None else None,
                engine=spec.engine,
                metrics_kind=None if profile is None or profile.metrics_kind is None else profile.metrics_kind.value,
                metrics_path=None if profile is None else profile.metrics_path,
            )
        self._routes = routes
        pools = set(self._target) | {r.view.pool for r in self._replicas}
        self._startup_s = {p: s for p, s in self._startup_s.items() if p in pools}
        self._counts = {p: self._count(p, routes.get(p)) for p in sorted(pools)}
        if self.telemetry is not None:
            counts = {p: dict(Counter(r.view.phase for r in self._replicas if r.view.pool == p)) for p in pools}
            crashes = {p: max((r.view.crashes for r in self._replicas if r.view.pool == p), default=0) for p in pools}
            self.telemetry.set_replicas(counts, crashes)

    def _count(self, pool: str, routes: PoolRoutes | None) -> ReplicaCounts:
        """Ready and starting as routing sees them (a removed pool has none), draining of any kind."""
        mine = [r.view for r in self._replicas if r.view.pool == pool]
        return ReplicaCounts(
            ready=len(routes.ready) if routes else 0,
            starting=routes.starting if routes else 0,
            draining=sum(v.phase is Phase.DRAINING for v in mine),
            consecutive_crashes=max((v.crashes for v in mine), default=0),
            startup_seconds=self._startup_s.get(pool),
        )


def _health_path(replica: Replica) -> str:
    return replica.profile.health_path if replica.profile is not None else "/healthz"
