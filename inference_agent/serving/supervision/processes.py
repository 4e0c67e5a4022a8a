"""The replica processes the supervisor runs, on the operating system's side: each started on a free loopback port with
a key of its own (``replica/key.py``), its quota environment (``quota.py``) and the GPUs it asks, held until its
process is reaped (``gpu_slots.py``: a replica waits to start until they are free); its pool's CPU cap applied right
after it starts and changed in place (``isolation/cpu.py``), the cap's cgroup going with the process; under MPS the
server made to allow the GPU limits it started with (``isolation/mps.py``). A stopped one is SIGTERMed, SIGKILLed
``STOP_GRACE_S`` later, and reaped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from inference_agent.config import EngineProfile, LaunchValues
from inference_agent.isolation.limits import IsolationError, LimitApplier, ReplicaLimits
from inference_agent.ports import free_port
from inference_agent.serving.replica.key import REPLICA_KEY_ENV, new_replica_key
from inference_agent.serving.supervision.gpu_slots import GpuSlots
from inference_agent.serving.supervision.launcher import Launcher, LaunchSpec, ReplicaProcess
from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.quota import (
    VISIBLE_DEVICES_ENV,
    GpuQuota,
    cpu_share,
    gpu_memory_fraction,
    replica_environment,
)
from inference_agent.serving.supervision.reconcile import Phase, ReplicaView

log = logging.getLogger(__name__)
STOP_GRACE_S = 15.0  # after SIGTERM, before SIGKILL (the replica itself waits its --drain-timeout-s first)


@dataclass
class Replica:
    """One replica as the supervisor holds it: its view (what ``reconcile`` decides on) and the process it runs."""

    view: ReplicaView
    slot: int
    port: int = 0
    process: ReplicaProcess | None = None
    cpus: tuple[int, ...] = ()  # its share of the node's cores
    cpu_millicores: int | None = None  # the cap last applied to its process
    profile: EngineProfile | None = None  # what its process runs; None: the built-in replica
    key: str = field(default="", repr=False)  # made anew for each process it runs


@dataclass
class _Stopping:
    replica_id: str
    process: ReplicaProcess
    kill_at: float


class ReplicaProcesses:
    """Starts, caps, stops and reaps the replicas' processes, and holds what each took (GPUs, cgroups, MPS limits)."""

    def __init__(
        self,
        launcher: Launcher,
        gpus: GpuSlots,
        *,
        cpus: tuple[int, ...],
        device: str,
        mps: bool,
        cpu_limits: LimitApplier,
        gpu_limits: LimitApplier | None,
    ) -> None:
        self.launcher = launcher
        self.gpus = gpus
        self.cpus = cpus
        self.device = device
        self.mps = mps
        self.cpu_limits = cpu_limits
        self.gpu_limits = gpu_limits  # MpsControl where an MPS daemon serves the replicas
        self._stopping: list[_Stopping] = []
        self._waiting_for_gpus: set[str] = set()  # pools whose next replica waits for GPUs (logged once)

    @property
    def stopping(self) -> int:
        """Processes SIGTERMed and not reaped yet."""
        return len(self._stopping)

    def start(self, replica: Replica, spec: PoolSpec, profile: EngineProfile | None, slots: int, now: float) -> bool:
        """Start the replica's process (``profile``'s command, or the built-in replica), one of ``slots`` sharing the
        node's cores; False (nothing started) while the GPUs it needs are held by others."""
        view = replica.view
        gpus = self.gpus.take(view.id, spec.gpus)
        if gpus is None:
            if view.pool not in self._waiting_for_gpus:
                free = len(self.gpus.free())
                log.warning(
                    "pool %s: its next replica waits for %d free GPUs (%d free now)", view.pool, spec.gpus, free
                )
                self._waiting_for_gpus.add(view.pool)
            return False
        self._waiting_for_gpus.discard(view.pool)
        replica.port, replica.key = free_port(), new_replica_key()
        replica.cpus = cpu_share(replica.slot, slots, self.cpus)
        replica.profile = profile
        launch = self._launch_spec(replica, spec, slots, gpus)
        replica.process = self.launcher.launch(launch)
        replica.view = replace(view, phase=Phase.STARTING, since=now, restart_at=None, gpu_quota=spec.gpu_quota)
        log.info(
            "replica %s of pool %s starting on port %d (pid %d%s): %s",
            view.id,
            view.pool,
            replica.port,
            replica.process.pid,
            f", GPUs {launch.env[VISIBLE_DEVICES_ENV]}" if gpus else "",
            " ".join(launch.command) if launch.command else f"built-in {view.kind} engine",
        )
        replica.cpu_millicores = None  # a new process: nothing capped yet
        self.limit(replica, spec.cpu_millicores)
        self._share_gpu(replica, spec.gpu_quota)
        return True

    def _launch_spec(self, replica: Replica, spec: PoolSpec, slots: int, gpus: tuple[int, ...]) -> LaunchSpec:
        """Its environment (quota, key, GPUs; a profile's own ``env`` under them) and a profile's rendered command."""
        view = replica.view
        env = replica_environment(
            slot=replica.slot, slots=slots, cpus=self.cpus, device=self.device, mps=self.mps, gpu_quota=spec.gpu_quota
        )
        env[REPLICA_KEY_ENV] = replica.key
        if gpus:
            env[VISIBLE_DEVICES_ENV] = ",".join(map(str, gpus))
        command: tuple[str, ...] | None = None
        if replica.profile is not None:
            values = LaunchValues(
                model=spec.model,
                port=replica.port,
                pool=view.pool,
                replica_id=view.id,
                gpus=len(gpus) or spec.gpus or 1,
                gpu_memory_fraction=gpu_memory_fraction(
                    spec.gpu_memory_mib, self.gpus.totals_mib(gpus), replica.profile.gpu_memory_fraction
                ),
                replica_key=replica.key,
            )
            argv, profile_env = replica.profile.render(values)
            command, env = tuple(argv), {**profile_env, **env}
        return LaunchSpec(view.id, view.pool, view.kind, replica.port, env, command)

    def _share_gpu(self, replica: Replica, quota: GpuQuota) -> None:
        """Have the MPS server allow the limits the replica started with (they narrow, never widen, the server's)."""
        if self.gpu_limits is None or replica.process is None or quota == GpuQuota():
            return
        limits = ReplicaLimits(
            device=_device_index(self.device),
            active_thread_percentage=quota.active_thread_percentage,
            pinned_memory_mib=quota.gpu_memory_mib,
        )
        try:
            outcome = self.gpu_limits.apply(replica.view.id, replica.process.pid, limits)
        except IsolationError as exc:
            log.error("replica %s of pool %s GPU limits: %s", replica.view.id, replica.view.pool, exc)
            return
        report = log.info if outcome.complete else log.warning
        report("replica %s of pool %s GPU limits: %s", replica.view.id, replica.view.pool, outcome.describe())

    def limit(self, replica: Replica, cpu_millicores: int | None) -> None:
        """Cap the replica's process at ``cpu_millicores`` (with its affinity), in place, when the cap changed; the
        outcome is logged once per change, and a cap that did not apply is not retried until the cap changes."""
        if replica.process is None or cpu_millicores == replica.cpu_millicores:
            return
        limits = ReplicaLimits(cpus=replica.cpus, cpu_millicores=cpu_millicores)
        outcome = self.cpu_limits.apply(replica.view.id, replica.process.pid, limits)
        replica.cpu_millicores = cpu_millicores
        report = log.info if outcome.complete else log.warning
        report("replica %s of pool %s CPU limits: %s", replica.view.id, replica.view.pool, outcome.describe())

    def release(self, replica_id: str) -> None:
        """Give back what the replica's process held: its GPUs, its CPU cgroup, its MPS limits."""
        self.gpus.release(replica_id)
        self.cpu_limits.release(replica_id)
        if self.gpu_limits is not None:
            self.gpu_limits.release(replica_id)

    def terminate(self, replica: Replica, now: float) -> None:
        if replica.process is not None and replica.process.poll() is None:
            replica.process.terminate()
            self._stopping.append(_Stopping(replica.view.id, replica.process, now + STOP_GRACE_S))
        elif replica.process is not None:
            self.release(replica.view.id)  # it exited before it was asked to
        replica.process = None

    def reap(self, now: float, runs_again: Callable[[str], bool]) -> None:
        """Reap the stopped processes that exited, SIGKILL those past their grace; ``runs_again``: whether a replica
        id has a process again (a restart), whose GPUs and limits then stay."""
        for stopping in list(self._stopping):
            if stopping.process.poll() is not None:
                self._stopping.remove(stopping)
                if not runs_again(stopping.replica_id):
                    self.release(stopping.replica_id)
            elif now >= stopping.kill_at:
                stopping.process.kill()

    def reap_all(self, until: float, clock: Callable[[], float]) -> None:
        """Reap every stopped process until ``until``, then SIGKILL the ones left."""
        while self._stopping and clock() < until:
            self.reap(clock(), lambda _replica_id: False)
            time.sleep(0.05)
        for stopping in self._stopping:
            stopping.process.kill()
        self._stopping = []


def _device_index(device: str) -> int:
    """The GPU a replica uses, as the node numbers it: ``cuda:1`` → 1, ``cuda`` → 0."""
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0
