"""CpuLimits on real child processes: affinity on every thread, and cpu.max where a cgroup may be written."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inference_agent.isolation.cpu import CpuLimits, cpu_max
from inference_agent.isolation.limits import AppliedLimits, ReplicaLimits

NOBODY = 65534


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "30"])
    yield process
    process.kill()
    process.wait()


def cgroup_standin(root: Path) -> Path:
    """A directory shaped like a delegated cgroup v2 directory with the cpu controller."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def unprivileged(call: Callable[[], AppliedLimits]) -> str:
    """``call().describe()`` as a user whom file modes bind: as is, or (under root) in a child turned ``nobody``."""
    if os.geteuid() != 0:
        return call().describe()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe and never returns
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, call().describe().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(child, 0)
    return text


@pytest.mark.parametrize(
    ("millicores", "line"), [(1500, "150000 100000"), (250, "25000 100000"), (2000, "200000 100000")]
)
def test_cpu_max_is_quota_and_period_in_microseconds(millicores: int, line: str) -> None:
    assert cpu_max(millicores) == line


def test_affinity_is_set_on_the_running_process(sleeper: subprocess.Popen[bytes]) -> None:
    one = (min(os.sched_getaffinity(0)),)
    result = CpuLimits().apply("r1", sleeper.pid, ReplicaLimits(cpus=one))
    assert result.applied == {"cpus": str(one[0])} and result.complete
    assert os.sched_getaffinity(sleeper.pid) == set(one)


def test_affinity_to_a_cpu_the_node_lacks_is_reported_not_applied(sleeper: subprocess.Popen[bytes]) -> None:
    result = CpuLimits().apply("r1", sleeper.pid, ReplicaLimits(cpus=(4095,)))
    assert "sched_setaffinity" in result.not_applied["cpus"]


def test_cpu_max_is_written_into_a_writable_cgroup(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    root = cgroup_standin(tmp_path / "fleetpilot")
    limits = CpuLimits(cgroup_root=root)
    result = limits.apply("r1", sleeper.pid, ReplicaLimits(cpu_millicores=1500))
    assert result.applied == {"cpu.max": "150000 100000"} and result.complete
    assert (root / "r1" / "cpu.max").read_text() == "150000 100000"
    assert (root / "r1" / "cgroup.procs").read_text() == str(sleeper.pid)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"  # children get the cpu controller
    assert limits.verify("r1", sleeper.pid, ReplicaLimits(cpu_millicores=500)).not_applied == {
        "cpu.max": f"{root}/r1/cpu.max is '150000 100000', not '50000 100000'"
    }


def test_cpu_max_is_not_applied_where_the_cgroup_is_not_writable(sleeper: subprocess.Popen[bytes]) -> None:
    base = Path(tempfile.mkdtemp(prefix="fleetpilot-cgroup-"))  # outside pytest's private tmp, so nobody can look in
    try:
        base.chmod(0o755)
        root = cgroup_standin(base / "fleetpilot")
        root.chmod(0o555)
        described = unprivileged(lambda: CpuLimits(cgroup_root=root).apply("r1", 1, ReplicaLimits(cpu_millicores=500)))
    finally:
        root.chmod(0o755)
        shutil.rmtree(base)
    assert described.startswith(f"cpu.max: not applied: {root} is not writable by uid")
    assert not (root / "r1").exists()


@pytest.mark.parametrize(
    ("root", "why"),
    [
        (None, "no cgroup root configured"),
        (Path("/nonexistent/fleetpilot"), "/nonexistent/fleetpilot does not exist"),
    ],
)
def test_cpu_max_is_not_applied_without_a_cgroup_root(root: Path | None, why: str) -> None:
    result = CpuLimits(cgroup_root=root).apply("r1", os.getpid(), ReplicaLimits(cpu_millicores=500))
    assert result.not_applied == {"cpu.max": why}


def test_a_directory_that_is_not_a_cgroup_v2_one_is_named(tmp_path: Path) -> None:
    result = CpuLimits(cgroup_root=tmp_path).apply("r1", os.getpid(), ReplicaLimits(cpu_millicores=500))
    assert result.not_applied == {"cpu.max": f"{tmp_path} is not a cgroup v2 directory (no cgroup.controllers)"}


def test_release_removes_the_replicas_cgroup(tmp_path: Path) -> None:
    root = cgroup_standin(tmp_path / "fleetpilot")
    (root / "r2").mkdir()  # as the kernel leaves it once its last process exits: removable
    CpuLimits(cgroup_root=root).release("r2")
    CpuLimits(cgroup_root=root).release("never-started")
    assert not (root / "r2").exists()


def cgroup_v1_standin(root: Path) -> Path:
    """A directory shaped like a cgroup v1 ``cpu`` directory (the hierarchy's root, or any group in it)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cgroup.procs").write_text("")
    return root


def test_the_cap_falls_back_to_cgroup_v1(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    root = cgroup_v1_standin(tmp_path / "cpu" / "fleetpilot")  # the kernel fills a new group; a stand-in cannot
    limits = CpuLimits(cgroup_root=tmp_path / "no-v2", cgroup_v1_root=root)
    result = limits.apply("r1", sleeper.pid, ReplicaLimits(cpu_millicores=250))
    assert result.applied == {"cpu.cfs_quota_us": "25000 100000"} and result.complete
    group = root / "r1"
    assert [(group / name).read_text() for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cgroup.procs")] == [
        "25000",
        "100000",
        str(sleeper.pid),
    ]
    assert limits.verify("r1", sleeper.pid, ReplicaLimits(cpu_millicores=500)).not_applied == {
        "cpu.cfs_quota_us": f"{group}/cpu.cfs_quota_us is '25000 100000', not '50000 100000'"
    }
    lifted = limits.apply("r1", sleeper.pid, ReplicaLimits())  # the cap removed: lifted in place
    assert lifted.applied == {"cpu.cfs_quota_us": "-1 100000"}
    (group / "cgroup.procs").unlink()  # as the kernel empties it once the process is gone
    for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"):
        (group / name).unlink()
    limits.release("r1")
    assert not group.exists()


def test_cgroup_v2_is_preferred_when_both_can_be_written(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    limits = CpuLimits(cgroup_root=cgroup_standin(tmp_path / "v2"), cgroup_v1_root=cgroup_v1_standin(tmp_path / "v1"))
    assert limits.apply("r1", sleeper.pid, ReplicaLimits(cpu_millicores=1000)).applied == {"cpu.max": "100000 100000"}
    assert not (tmp_path / "v1" / "r1").exists()


def test_a_replica_never_capped_gets_no_cgroup(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    limits = CpuLimits(cgroup_v1_root=cgroup_v1_standin(tmp_path / "v1"))
    assert limits.apply("r1", sleeper.pid, ReplicaLimits()).describe() == "no limits"
    assert not (tmp_path / "v1" / "r1").exists()


def test_neither_hierarchy_writable_reports_both_reasons(tmp_path: Path) -> None:
    limits = CpuLimits(cgroup_root=None, cgroup_v1_root=tmp_path / "plain" / "fleetpilot")
    result = limits.apply("r1", os.getpid(), ReplicaLimits(cpu_millicores=500))
    assert result.not_applied == {
        "cpu.max": f"no cgroup root configured; cgroup v1: {tmp_path}/plain/fleetpilot does not exist, "
        f"nor is {tmp_path}/plain a cgroup v1 cpu directory to create it in"
    }
    cgroup_v1_standin(tmp_path / "plain")  # now a hierarchy, but the root a plain directory in it
    (tmp_path / "plain" / "fleetpilot").mkdir()
    assert CpuLimits(cgroup_v1_root=tmp_path / "plain" / "fleetpilot").verify(
        "r1", os.getpid(), ReplicaLimits(cpu_millicores=500)
    ).not_applied == {
        "cpu.max": f"no cgroup root configured; cgroup v1: {tmp_path}/plain/fleetpilot is not a cgroup v1 cpu "
        "directory (no cpu.cfs_quota_us)"
    }


def test_the_v1_cap_is_not_applied_where_the_hierarchy_is_not_writable(sleeper: subprocess.Popen[bytes]) -> None:
    base = Path(tempfile.mkdtemp(prefix="fleetpilot-cgroup-"))  # outside pytest's private tmp, so nobody can look in
    try:
        base.chmod(0o755)
        hierarchy = cgroup_v1_standin(base / "cpu")
        hierarchy.chmod(0o555)
        limits = CpuLimits(cgroup_v1_root=hierarchy / "fleetpilot")
        described = unprivileged(lambda: limits.apply("r1", sleeper.pid, ReplicaLimits(cpu_millicores=500)))
    finally:
        hierarchy.chmod(0o755)
        shutil.rmtree(base)
    assert described.startswith(f"cpu.max: not applied: no cgroup root configured; cgroup v1: {hierarchy} is not")


REAL_V1 = Path("/sys/fs/cgroup/cpu")


@pytest.mark.skipif(
    not (REAL_V1 / "cpu.cfs_quota_us").exists() or not os.access(REAL_V1, os.W_OK),
    reason="needs a writable cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu",
)
def test_the_kernel_takes_the_v1_cap_in_a_root_created_on_first_use() -> None:
    root = REAL_V1 / f"fleetpilot-test-{os.getpid()}"
    limits = CpuLimits(cgroup_v1_root=root)
    process = subprocess.Popen(["sleep", "30"])
    try:
        result = limits.apply("r1", process.pid, ReplicaLimits(cpu_millicores=250))
        assert result.applied == {"cpu.cfs_quota_us": "25000 100000"} and result.complete
        assert f"cpu:/{root.name}/r1" in Path(f"/proc/{process.pid}/cgroup").read_text()
    finally:
        process.kill()
        process.wait()
        limits.release("r1")
        root.rmdir()
    assert not root.exists()
