"""Under MPS the supervisor starts replicas with their pool's GPU limits, has the MPS server allow them, and replaces
the replicas (start the new, then drain the old) when the limits change. Real replica processes over the fake
engine; the in-repo fake ``nvidia-cuda-mps-control`` records the commands (the real one runs in gpu-check.sh)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference_agent.isolation.mps import MpsControl, process_environment
from inference_agent.serving.supervision.launcher import ProcessLauncher
from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.quota import MPS_THREADS_ENV
from inference_agent.serving.supervision.reconcile import Phase, Timing
from inference_agent.serving.supervision.supervisor import Supervisor
from tests.inference_agent.isolation.test_mps import FAKE, commands
from wire.control import DesiredState

pytestmark = pytest.mark.slow


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    mps = MpsControl(binary=str(FAKE), uid=1000, environ={**os.environ, "FAKE_MPS_LOG": str(tmp_path / "mps.log")})
    made = Supervisor(
        {"p": PoolSpec(1)},
        ProcessLauncher(tmp_path / "logs", engine="fake"),  # the fake engine runs anywhere; MPS is the agent's view
        timing=Timing(drain_deadline_s=10.0),
        device="cuda",
        mps=True,
        gpu_limits=mps,
        cpus=(0,),
    )
    yield made
    made.shutdown(5.0)


def ready_ids(supervisor: Supervisor) -> list[str]:
    return [e.replica_id for e in supervisor.routes()["p"].ready]


def step_until(supervisor: Supervisor, wanted: list[str], timeout_s: float = 30.0) -> list[int]:
    """Step until the ready replicas are ``wanted``; answers how many were ready at each step."""
    deadline, seen = time.monotonic() + timeout_s, []
    while ready_ids(supervisor) != wanted:
        assert time.monotonic() < deadline, f"ready {ready_ids(supervisor)}, not {wanted}"
        supervisor.step()
        seen.append(len(ready_ids(supervisor)))
        time.sleep(0.05)
    return seen


def threads_env(supervisor: Supervisor, replica_id: str) -> str | None:
    [replica] = [r for r in supervisor._replicas if r.view.id == replica_id]
    assert replica.process is not None
    return process_environment(replica.process.pid).get(MPS_THREADS_ENV)


def test_new_gpu_limits_replace_the_replica_without_a_moment_without_one(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    supervisor.set_desired(DesiredState.model_validate({"pool_limits": {"p": {"active_thread_percentage": 40}}}))
    step_until(supervisor, ["p-1"])
    assert threads_env(supervisor, "p-1") == "40"
    first = commands(tmp_path / "mps.log")
    assert "start_server -uid 1000" in first and "set_default_active_thread_percentage 40" in first

    supervisor.set_desired(DesiredState.model_validate({"pool_limits": {"p": {"active_thread_percentage": 20}}}))
    ready_counts = step_until(supervisor, ["p-2"])
    assert min(ready_counts) >= 1  # p-1 served until p-2 was warm
    assert threads_env(supervisor, "p-2") == "20"
    assert [r.view.phase for r in supervisor._replicas if r.view.id == "p-1"] in ([], [Phase.DRAINING])

    supervisor.set_desired(
        DesiredState.model_validate(
            {"pool_limits": {"p": {"active_thread_percentage": 20}}, "pools": {"p": {"replicas": 1}}}
        )
    )
    supervisor.step()
    assert ready_ids(supervisor) == ["p-2"]  # the same limits: nothing replaced
