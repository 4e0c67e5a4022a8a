"""CPU limits of a running replica: its CPU affinity, and its cgroup v2 ``cpu.max`` where the agent may write it.

Affinity is set on every thread of the process (``sched_setaffinity`` on a pid moves only its main thread; threads
started later inherit from the thread that starts them). ``cpu.max`` needs a cgroup v2 directory delegated to the
agent (``cgroup_root``, with the ``cpu`` controller): each replica gets a child ``cgroup_root/REPLICA_ID`` holding
its process. Worked: 1500 millicores with the 100 ms period → ``cpu.max`` = ``"150000 100000"``, 1.5 cores' time.
Where the root is missing, not cgroup v2, or not writable, ``cpu.max`` is reported not applied with that reason.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from inference_agent.isolation.limits import AppliedLimits, ReplicaLimits

log = logging.getLogger(__name__)
CPU_PERIOD_US = 100_000  # the kernel's default cpu.max period


def cpu_max(millicores: int, period_us: int = CPU_PERIOD_US) -> str:
    """The ``cpu.max`` line for ``millicores``: 250 → ``"25000 100000"``."""
    return f"{millicores * period_us // 1000} {period_us}"


def thread_ids(pid: int) -> list[int]:
    """The ids of every thread of ``pid`` (its main thread only where ``/proc`` is not there to list them)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return [pid]


@dataclass
class CpuLimits:
    """Affinity for every replica; ``cpu.max`` under ``cgroup_root`` (None: the agent has no cgroup to write)."""

    cgroup_root: Path | None = None
    period_us: int = CPU_PERIOD_US

    def apply(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        failed: dict[str, str] = {}
        if limits.cpus is not None:
            try:
                for tid in thread_ids(pid):
                    os.sched_setaffinity(tid, limits.cpus)
            except OSError as exc:
                failed["cpus"] = f"sched_setaffinity({pid}): {exc.strerror or exc}"
        if limits.cpu_millicores is not None:
            why = self._write_cgroup(replica_id, pid, limits.cpu_millicores)
            if why is not None:
                failed["cpu.max"] = why
        checked = self.verify(replica_id, pid, limits)
        # a failure to apply explains better than the read-back's mismatch
        return AppliedLimits(replica_id, pid, checked.applied, {**checked.not_applied, **failed})

    def verify(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        applied: dict[str, str] = {}
        not_applied: dict[str, str] = {}
        if limits.cpus is not None:
            wanted = set(limits.cpus)
            try:
                found = {frozenset(os.sched_getaffinity(tid)) for tid in thread_ids(pid)}
            except OSError as exc:
                not_applied["cpus"] = f"sched_getaffinity({pid}): {exc.strerror or exc}"
            else:
                if found == {frozenset(wanted)}:
                    applied["cpus"] = _cpu_list(wanted)
                else:
                    not_applied["cpus"] = f"threads run on {' / '.join(sorted(_cpu_list(s) for s in found))}"
        if limits.cpu_millicores is not None:
            outcome = self._read_cgroup(replica_id, pid, cpu_max(limits.cpu_millicores, self.period_us))
            (applied if outcome[0] else not_applied)["cpu.max"] = outcome[1]
        return AppliedLimits(replica_id, pid, applied, not_applied)

    def release(self, replica_id: str) -> None:
        """Remove the replica's cgroup; the kernel refuses while a process is still in it, which is then logged."""
        unavailable = self._unavailable()
        if unavailable is None and self.cgroup_root is not None:
            try:
                (self.cgroup_root / replica_id).rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cgroup of replica %s left in place: %s", replica_id, exc)

    # ---- cgroup v2
    def _unavailable(self) -> str | None:
        """Why ``cpu.max`` cannot be written under the root, or None when it can."""
        root = self.cgroup_root
        if root is None:
            return "no cgroup root configured"
        if not root.is_dir():
            return f"{root} does not exist"
        try:
            controllers = (root / "cgroup.controllers").read_text().split()
        except OSError:
            return f"{root} is not a cgroup v2 directory (no cgroup.controllers)"
        if "cpu" not in controllers:
            return f"the cpu controller is not available in {root} (it has {' '.join(controllers) or 'none'})"
        if not os.access(root, os.W_OK):
            return f"{root} is not writable by uid {os.geteuid()}"
        return None

    def _write_cgroup(self, replica_id: str, pid: int, millicores: int) -> str | None:
        why = self._unavailable()
        if why is not None or self.cgroup_root is None:
            return why
        group = self.cgroup_root / replica_id
        try:
            subtree = self.cgroup_root / "cgroup.subtree_control"
            if "cpu" not in (subtree.read_text().split() if subtree.exists() else []):
                subtree.write_text("+cpu")  # children get cpu.max only once the parent hands them the controller
            group.mkdir(exist_ok=True)
            (group / "cpu.max").write_text(cpu_max(millicores, self.period_us))
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            return f"writing {group}: {exc.strerror or exc}"
        return None

    def _read_cgroup(self, replica_id: str, pid: int, wanted: str) -> tuple[bool, str]:
        """(holds, what): the replica's cgroup has ``wanted`` as ``cpu.max`` and holds ``pid``."""
        why = self._unavailable()
        if why is not None or self.cgroup_root is None:
            return False, str(why)
        group = self.cgroup_root / replica_id
        try:
            found = (group / "cpu.max").read_text().strip()
            members = (group / "cgroup.procs").read_text().split()
        except OSError as exc:
            return False, f"reading {group}: {exc.strerror or exc}"
        if found != wanted:
            return False, f"{group}/cpu.max is {found!r}, not {wanted!r}"
        if str(pid) not in members:
            return False, f"pid {pid} is not in {group}"
        return True, found


def _cpu_list(cpus: set[int] | frozenset[int]) -> str:
    return ",".join(map(str, sorted(cpus)))
