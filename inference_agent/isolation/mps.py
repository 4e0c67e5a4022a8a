"""GPU shares through NVIDIA MPS: ``nvidia-cuda-mps-control`` for the server, the client environment per replica.

How MPS takes limits: a client's thread percentage and pinned memory limit are read from its environment
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=<n>M"``, set by
``serving/supervision/quota.py``) when it creates its CUDA context, and can only narrow what the control daemon allows
its server. So the per-replica limits travel in the replica's environment, and ``apply`` makes sure the agent's MPS
server exists (``start_server -uid``) and allows at least the largest share of the replicas it serves
(``set_default_active_thread_percentage``, ``set_active_thread_percentage <server pid>``, the pinned-memory
counterparts): a server left at 30% would hold a replica asking for 70% to 30%. ``verify`` reads the replica's
environment and the server's percentage back. Nothing changes a running client: see ``limits.needs_replacement``. One
device takes at most 48 clients; the 49th is refused before anything is sent.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inference_agent.isolation.limits import AppliedLimits, IsolationError, ReplicaLimits
from inference_agent.serving.supervision.quota import MPS_MEMORY_ENV, MPS_THREADS_ENV, GpuQuota, replica_environment

CONTROL_BINARY = "nvidia-cuda-mps-control"
MAX_CLIENTS_PER_DEVICE = 48  # MPS on Volta and later


class MpsError(IsolationError):
    """The control daemon could not be reached or did not do what it was asked."""


class ClientLimitReached(MpsError):
    """The device already serves as many MPS clients as it can."""


def process_environment(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with (``/proc/PID/environ``); raises OSError when it cannot be read."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


@dataclass
class MpsControl:
    """Drives ``binary`` with ``environ`` (the daemon's ``CUDA_MPS_PIPE_DIRECTORY``; None: the agent's own)."""

    binary: str = CONTROL_BINARY
    uid: int = field(default_factory=os.getuid)
    environ: Mapping[str, str] | None = None
    max_clients_per_device: int = MAX_CLIENTS_PER_DEVICE
    timeout_s: float = 10.0
    read_environment: Callable[[int], Mapping[str, str]] = process_environment
    _clients: dict[str, ReplicaLimits] = field(default_factory=dict, init=False)  # by replica id

    # ---- the control daemon, one command per run, as ``echo COMMAND | nvidia-cuda-mps-control``
    def command(self, line: str) -> str:
        """Send one command line; answers what the daemon printed. Raises MpsError when it cannot be run."""
        try:
            done = subprocess.run(
                [self.binary],
                input=f"{line}\n",
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=dict(self.environ) if self.environ is not None else None,
                check=False,
            )
        except FileNotFoundError:
            raise MpsError(f"{self.binary} not found: is the NVIDIA driver's MPS installed?") from None
        except subprocess.TimeoutExpired:
            raise MpsError(f"{self.binary} did not answer {line!r} within {self.timeout_s:.0f} s") from None
        if done.returncode != 0:
            raise MpsError(f"{self.binary} {line!r} exited {done.returncode}: {done.stderr.strip() or done.stdout}")
        return done.stdout.strip()

    def servers(self) -> list[int]:
        return [int(word) for word in self.command("get_server_list").split() if word.isdigit()]

    def server(self) -> int:
        """The MPS server's pid, started for ``uid`` when none runs (the daemon runs one server at a time)."""
        found = self.servers()
        if not found:
            self.command(f"start_server -uid {self.uid}")
            found = self.servers()
        if not found:
            raise MpsError(f"no MPS server runs after start_server -uid {self.uid}")
        return found[0]

    def active_thread_percentage(self, server: int) -> float | None:
        answer = self.command(f"get_active_thread_percentage {server}")
        try:
            return float(answer.split()[-1])
        except (ValueError, IndexError):
            return None

    # ---- LimitApplier
    def apply(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        device = _device(limits)
        sharing = [rid for rid, other in self._clients.items() if _device(other) == device and rid != replica_id]
        if len(sharing) >= self.max_clients_per_device:
            raise ClientLimitReached(
                f"device {device} already has {len(sharing)} MPS clients, the most it takes: "
                f"replica {replica_id} would be client number {len(sharing) + 1}"
            )
        self._clients[replica_id] = limits
        if limits.active_thread_percentage is not None or limits.pinned_memory_mib is not None:
            self._allow(device, limits)
        return self.verify(replica_id, pid, limits)

    def _allow(self, device: int, limits: ReplicaLimits) -> None:
        """Have the server (started if need be) allow the largest share and memory limit among its replicas."""
        percent = max(other.active_thread_percentage or 100 for other in self._clients.values())
        if limits.active_thread_percentage is not None:
            self.command(f"set_default_active_thread_percentage {percent}")  # for a server started later
        server = self.server()
        if limits.active_thread_percentage is not None:
            self.command(f"set_active_thread_percentage {server} {percent}")
        memory = [other.pinned_memory_mib for other in self._clients.values() if _device(other) == device]
        if limits.pinned_memory_mib is not None and None not in memory:  # one replica unlimited: no ceiling
            ceiling = max(m for m in memory if m is not None)
            self.command(f"set_default_device_pinned_mem_limit {device} {ceiling}M")
            self.command(f"set_device_pinned_mem_limit {server} {device} {ceiling}M")

    def verify(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        applied: dict[str, str] = {}
        not_applied: dict[str, str] = {}
        wanted = _client_environment(limits)
        try:
            environment = self.read_environment(pid) if wanted else {}
        except OSError as exc:
            not_applied.update(dict.fromkeys(wanted, f"cannot read the environment of pid {pid}: {exc.strerror}"))
        else:
            for name, value in wanted.items():
                found = environment.get(name)
                if found == value:
                    applied[name] = value
                else:
                    not_applied[name] = (
                        f"the replica started with {name}={found or '(unset)'}, not {value}: an MPS client's limits "
                        "are fixed when it starts, so it takes a replacement replica"
                    )
        if limits.active_thread_percentage is not None:
            self._check_server(limits.active_thread_percentage, applied, not_applied)
        return AppliedLimits(replica_id, pid, applied, not_applied)

    def release(self, replica_id: str) -> None:
        self._clients.pop(replica_id, None)

    def _check_server(self, percent: int, applied: dict[str, str], not_applied: dict[str, str]) -> None:
        """The server must allow at least ``percent``: a lower setting there wins over the client's environment."""
        servers = self.servers()
        if not servers:
            not_applied["mps_server"] = "no MPS server runs"
            return
        allowed = self.active_thread_percentage(servers[0])
        if allowed is None:
            not_applied["mps_server"] = f"server {servers[0]} did not report its active thread percentage"
        elif allowed < percent:
            not_applied["mps_server"] = f"server {servers[0]} allows {allowed:g}%, less than {percent}%"
        else:
            applied["mps_server"] = f"server {servers[0]} allows {allowed:g}%"


def _device(limits: ReplicaLimits) -> int:
    """The device a replica's MPS limits are for; a replica without one uses the first device."""
    return limits.device if limits.device is not None else 0


def _client_environment(limits: ReplicaLimits) -> dict[str, str]:
    """The MPS variables the replica must have started with: those ``supervision/quota.py`` writes."""
    quota = GpuQuota(limits.active_thread_percentage, limits.pinned_memory_mib)
    env = replica_environment(slot=0, slots=1, cpus=(0,), device="cuda", mps=True, gpu_quota=quota)
    return {name: value for name, value in env.items() if name in (MPS_THREADS_ENV, MPS_MEMORY_ENV)}
