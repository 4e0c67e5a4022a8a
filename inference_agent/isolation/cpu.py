"""CPU limits of a running replica: its CPU affinity, and a CPU cap through the cgroup the agent may write.

Affinity is set on every thread of the process (``sched_setaffinity`` on a pid moves only its main thread; threads
started later inherit from the thread that starts them). The cap needs a cgroup directory the agent may write: a
cgroup v2 directory delegated to it (``cgroup_root``, with the ``cpu`` controller), else, as a fallback on hosts
whose cpu controller is still mounted as cgroup v1, a directory of that hierarchy (``cgroup_v1_root``, e.g.
``/sys/fs/cgroup/cpu/fleetpilot``, created when its parent is one). Each replica gets a child ``ROOT/REPLICA_ID``
holding its process. Worked: 1500 millicores with the 100 ms period → v2 ``cpu.max`` = ``"150000 100000"``, or v1
``cpu.cfs_quota_us`` = 150000 with ``cpu.cfs_period_us`` = 100000: 1.5 cores' time. Where neither hierarchy can be
written, the cap is reported not applied with each one's reason.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inference_agent.isolation.limits import AppliedLimits, ReplicaLimits

log = logging.getLogger(__name__)
CPU_PERIOD_US = 100_000  # the kernel's default period, in cgroup v2 and v1 alike


def cpu_max(millicores: int, period_us: int = CPU_PERIOD_US) -> str:
    """The ``cpu.max`` line for ``millicores``: 250 → ``"25000 100000"`` (quota, then period, in microseconds)."""
    return f"{millicores * period_us // 1000} {period_us}"


def thread_ids(pid: int) -> list[int]:
    """The ids of every thread of ``pid`` (its main thread only where ``/proc`` is not there to list them)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return [pid]


class CpuCgroup(Protocol):
    """One cgroup hierarchy that can cap a replica's CPU time."""

    @property
    def key(self) -> str:
        """The limit's name in ``AppliedLimits``: the file that carries it."""
        ...

    def unavailable(self) -> str | None:
        """Why a cap cannot be written here, or None when it can."""
        ...

    def group(self, replica_id: str) -> Path: ...

    def line(self, millicores: int | None, period_us: int) -> str:
        """The cap as ``"QUOTA PERIOD"``, as ``read`` gives it back; None: no cap."""
        ...

    def write(self, replica_id: str, pid: int, line: str) -> None:
        """Set the replica's cap to ``line`` and move ``pid`` into its group; OSError when the kernel refuses."""
        ...

    def read(self, replica_id: str) -> tuple[str, list[str]]:
        """The replica's cap line and the pids in its group; OSError when they cannot be read."""
        ...


@dataclass(frozen=True)
class CgroupV2:
    root: Path
    key: str = "cpu.max"

    def unavailable(self) -> str | None:
        root = self.root
        if not root.is_dir():
            return f"{root} does not exist"
        try:
            controllers = (root / "cgroup.controllers").read_text().split()
        except OSError:
            return f"{root} is not a cgroup v2 directory (no cgroup.controllers)"
        if "cpu" not in controllers:
            return f"the cpu controller is not available in {root} (it has {' '.join(controllers) or 'none'})"
        return _unwritable(root)

    def group(self, replica_id: str) -> Path:
        return self.root / replica_id

    def line(self, millicores: int | None, period_us: int) -> str:
        return f"max {period_us}" if millicores is None else cpu_max(millicores, period_us)

    def write(self, replica_id: str, pid: int, line: str) -> None:
        subtree = self.root / "cgroup.subtree_control"
        if "cpu" not in (subtree.read_text().split() if subtree.exists() else []):
            subtree.write_text("+cpu")  # children get cpu.max only once the parent hands them the controller
        group = self.group(replica_id)
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(line)
        (group / "cgroup.procs").write_text(str(pid))

    def read(self, replica_id: str) -> tuple[str, list[str]]:
        group = self.group(replica_id)
        return (group / "cpu.max").read_text().strip(), (group / "cgroup.procs").read_text().split()


@dataclass(frozen=True)
class CgroupV1:
    """The cgroup v1 ``cpu`` hierarchy: the quota and period are two files, and -1 is no quota."""

    root: Path
    key: str = "cpu.cfs_quota_us"

    def unavailable(self) -> str | None:
        root = self.root
        if root.is_dir():
            if not (root / "cpu.cfs_quota_us").exists():
                return f"{root} is not a cgroup v1 cpu directory (no cpu.cfs_quota_us)"
            return _unwritable(root)
        if not (root.parent / "cpu.cfs_quota_us").exists():
            return f"{root} does not exist, nor is {root.parent} a cgroup v1 cpu directory to create it in"
        return _unwritable(root.parent)

    def group(self, replica_id: str) -> Path:
        return self.root / replica_id

    def line(self, millicores: int | None, period_us: int) -> str:
        return f"-1 {period_us}" if millicores is None else cpu_max(millicores, period_us)

    def write(self, replica_id: str, pid: int, line: str) -> None:
        quota, period = line.split()
        group = self.group(replica_id)
        group.mkdir(parents=True, exist_ok=True)  # the root too, on first use
        (group / "cpu.cfs_period_us").write_text(period)
        (group / "cpu.cfs_quota_us").write_text(quota)
        (group / "cgroup.procs").write_text(str(pid))  # moves every thread of the process (``tasks``: one thread)

    def read(self, replica_id: str) -> tuple[str, list[str]]:
        group = self.group(replica_id)
        quota = (group / "cpu.cfs_quota_us").read_text().strip()
        period = (group / "cpu.cfs_period_us").read_text().strip()
        return f"{quota} {period}", (group / "cgroup.procs").read_text().split()


@dataclass
class CpuLimits:
    """Affinity for every replica; a CPU cap under ``cgroup_root`` (v2), else ``cgroup_v1_root`` (None: not there).

    A replica whose cap is removed (``cpu_millicores`` None) while it has a cgroup is left uncapped in place.
    """

    cgroup_root: Path | None = None
    cgroup_v1_root: Path | None = None
    period_us: int = CPU_PERIOD_US

    def apply(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        failed: dict[str, str] = {}
        lifted: dict[str, str] = {}
        if limits.cpus is not None:
            try:
                for tid in thread_ids(pid):
                    os.sched_setaffinity(tid, limits.cpus)
            except OSError as exc:
                failed["cpus"] = f"sched_setaffinity({pid}): {exc.strerror or exc}"
        cgroup, why = self._cgroup()
        if cgroup is None:
            if limits.cpu_millicores is not None:
                failed["cpu.max"] = why
        elif limits.cpu_millicores is not None or cgroup.group(replica_id).is_dir():
            line = cgroup.line(limits.cpu_millicores, self.period_us)
            try:
                cgroup.write(replica_id, pid, line)
            except OSError as exc:
                failed[cgroup.key] = f"writing {cgroup.group(replica_id)}: {exc.strerror or exc}"
            else:
                if limits.cpu_millicores is None:
                    lifted[cgroup.key] = line
        checked = self.verify(replica_id, pid, limits)
        # a failure to apply explains better than the read-back's mismatch
        return AppliedLimits(replica_id, pid, {**checked.applied, **lifted}, {**checked.not_applied, **failed})

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
            cgroup, why = self._cgroup()
            if cgroup is None:
                not_applied["cpu.max"] = why
            else:
                holds, what = _check(cgroup, replica_id, pid, cgroup.line(limits.cpu_millicores, self.period_us))
                (applied if holds else not_applied)[cgroup.key] = what
        return AppliedLimits(replica_id, pid, applied, not_applied)

    def release(self, replica_id: str) -> None:
        """Remove the replica's cgroup; the kernel refuses while a process is still in it, which is then logged."""
        cgroup, _ = self._cgroup()
        if cgroup is not None:
            try:
                cgroup.group(replica_id).rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cgroup of replica %s left in place: %s", replica_id, exc)

    def _cgroup(self) -> tuple[CpuCgroup | None, str]:
        """The hierarchy caps go to (v2 first, then the v1 fallback), or None and why neither can take one."""
        if self.cgroup_root is None:
            why = "no cgroup root configured"
        else:
            v2 = CgroupV2(self.cgroup_root)
            why = v2.unavailable() or ""
            if not why:
                return v2, ""
        if self.cgroup_v1_root is not None:
            v1 = CgroupV1(self.cgroup_v1_root)
            v1_why = v1.unavailable()
            if v1_why is None:
                return v1, ""
            why = f"{why}; cgroup v1: {v1_why}"
        return None, why


def _check(cgroup: CpuCgroup, replica_id: str, pid: int, wanted: str) -> tuple[bool, str]:
    """(holds, what): the replica's cgroup has the cap ``wanted`` and holds ``pid``."""
    group = cgroup.group(replica_id)
    try:
        found, members = cgroup.read(replica_id)
    except OSError as exc:
        return False, f"reading {group}: {exc.strerror or exc}"
    if found != wanted:
        return False, f"{group}/{cgroup.key} is {found!r}, not {wanted!r}"
    if str(pid) not in members:
        return False, f"pid {pid} is not in {group}"
    return True, found


def _unwritable(directory: Path) -> str | None:
    return None if os.access(directory, os.W_OK) else f"{directory} is not writable by uid {os.geteuid()}"


def _cpu_list(cpus: set[int] | frozenset[int]) -> str:
    return ",".join(map(str, sorted(cpus)))
