"""The supervisor caps each replica's CPU at its pool's limit: at start, in place on a change, released with the
process. The replicas are ``sleep`` processes (nothing here needs them to answer) in a cgroup v1 stand-in."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from inference_agent.isolation.cpu import CpuLimits
from inference_agent.serving.supervision.launcher import LaunchSpec
from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.supervisor import Supervisor
from tests.inference_agent.isolation.test_cpu import cgroup_v1_standin
from wire.control import DesiredState


class SleepLauncher:
    """Replica processes that only sleep: the supervisor starts, caps and stops them."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def launch(self, spec: LaunchSpec) -> subprocess.Popen[bytes]:
        self.processes.append(subprocess.Popen(["sleep", "30"]))
        return self.processes[-1]

    def log_tail(self, replica_id: str, lines: int = 20) -> str:
        return ""


@dataclass
class RecordingLimits(CpuLimits):
    """CpuLimits that also notes each release (a stand-in directory, unlike the kernel's, keeps its files)."""

    released: list[str] = field(default_factory=list)

    def release(self, replica_id: str) -> None:
        self.released.append(replica_id)


@pytest.fixture
def launcher() -> Iterator[SleepLauncher]:
    made = SleepLauncher()
    yield made
    for process in made.processes:
        process.kill()
        process.wait()


CPU = min(os.sched_getaffinity(0))


def quota(group: Path) -> str:
    return (group / "cpu.cfs_quota_us").read_text()


def test_a_pools_cap_applies_at_start_changes_in_place_and_goes_with_the_process(
    tmp_path: Path, launcher: SleepLauncher, caplog: pytest.LogCaptureFixture
) -> None:
    root = cgroup_v1_standin(tmp_path / "cpu" / "fleetpilot")
    limits = RecordingLimits(cgroup_v1_root=root)
    supervisor = Supervisor({"p": PoolSpec(1, cpu_millicores=250)}, launcher, cpus=(CPU,), cpu_limits=limits)
    with caplog.at_level(logging.INFO, logger="inference_agent.serving.supervision"):
        supervisor.step()
        supervisor.step()
    [process] = launcher.processes
    group = root / "p-1"
    assert (quota(group), (group / "cgroup.procs").read_text()) == ("25000", str(process.pid))
    applied = [r.getMessage() for r in caplog.records if "CPU limits" in r.getMessage()]
    assert applied == [f"replica p-1 of pool p CPU limits: cpus: {CPU}; cpu.cfs_quota_us: 25000 100000"]  # once

    supervisor.set_desired(
        DesiredState.model_validate({"pool_limits": {"p": {"cpu_share": 0.5}}})
    )  # half of its one core
    supervisor.step()
    assert quota(group) == "50000" and launcher.processes == [process]  # in place: no replacement
    supervisor.set_desired(
        DesiredState.model_validate({"pools": {"p": {"replicas": 1}}})
    )  # no pool_limits: not limited
    supervisor.step()
    assert quota(group) == "-1"  # the cap lifted

    supervisor.set_desired(DesiredState.model_validate({"pools": {"p": {"replicas": 0}}}))
    supervisor.step()  # still warming: stopped at once
    process.wait(timeout=5)
    supervisor.step()
    assert limits.released == ["p-1"]
    supervisor.shutdown(1.0)


def test_a_cap_that_cannot_apply_is_logged_once_with_why(
    launcher: SleepLauncher, caplog: pytest.LogCaptureFixture
) -> None:
    supervisor = Supervisor({"p": PoolSpec(1, cpu_millicores=250)}, launcher, cpus=(CPU,), cpu_limits=CpuLimits())
    with caplog.at_level(logging.INFO, logger="inference_agent.serving.supervision"):
        for _ in range(3):
            supervisor.step()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"replica p-1 of pool p CPU limits: cpus: {CPU}; cpu.max: not applied: no cgroup root configured"
    ]
    supervisor.shutdown(1.0)


def test_an_uncapped_pool_leaves_its_replicas_to_pin_themselves(tmp_path: Path, launcher: SleepLauncher) -> None:
    root = cgroup_v1_standin(tmp_path / "cpu" / "fleetpilot")
    supervisor = Supervisor({"p": PoolSpec(1)}, launcher, cpus=(CPU,), cpu_limits=CpuLimits(cgroup_v1_root=root))
    supervisor.step()
    assert not (root / "p-1").exists()
    supervisor.shutdown(1.0)
