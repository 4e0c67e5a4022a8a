"""The supervisor with real replica processes over the fake engine: scale up, drain on scale-down, crash restarts."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.supervision.launcher import ProcessLauncher
from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.reconcile import Phase, Timing
from inference_agent.serving.supervision.supervisor import Supervisor
from tests.support.supervising import step_until
from wire.control import DesiredState

pytestmark = pytest.mark.slow


@pytest.fixture
def make_supervisor(tmp_path: Path) -> Iterator[Callable[..., tuple[Supervisor, CollectorRegistry]]]:
    made: list[Supervisor] = []

    def make(pools: dict[str, PoolSpec], timing: Timing | None = None) -> tuple[Supervisor, CollectorRegistry]:
        registry = CollectorRegistry()
        launcher = ProcessLauncher(tmp_path / "logs", engine="fake", extra_args=("--token-delay-s", "0.01"))
        supervisor = Supervisor(pools, launcher, ServingTelemetry(registry), timing or Timing(), cpus=(0, 1))
        made.append(supervisor)
        return supervisor, registry

    yield make
    for supervisor in made:
        supervisor.shutdown(5.0)


def phases(supervisor: Supervisor) -> list[Phase]:
    return sorted(r.view.phase for r in supervisor._replicas)


def test_scale_up_then_down_drains(make_supervisor: Callable[..., tuple[Supervisor, CollectorRegistry]]) -> None:
    supervisor, registry = make_supervisor({"p": PoolSpec(2)})
    step_until(supervisor, lambda: len(supervisor.routes()["p"].ready) == 2)
    first = supervisor.routes()["p"].ready[0]
    assert (
        httpx.post(
            f"{first.url}/v1/completions", json={"model": "p", "prompt": "x"}, headers=first.auth_headers
        ).status_code
        == 200
    )
    assert registry.get_sample_value("fleetpilot_agent_replicas", {"pool": "p", "phase": "ready"}) == 2

    supervisor.set_desired(DesiredState.model_validate({"pools": {"p": {"replicas": 1, "kind": "text"}}}))
    step_until(supervisor, lambda: phases(supervisor) == [Phase.READY] and not supervisor._processes.stopping)
    assert len(supervisor.routes()["p"].ready) == 1
    assert registry.get_sample_value("fleetpilot_agent_replica_actions_total", {"verb": "drain", "reason": "ScaleDown"})


def test_scale_down_never_kills_in_flight_work(
    make_supervisor: Callable[..., tuple[Supervisor, CollectorRegistry]],
) -> None:
    supervisor, _ = make_supervisor({"p": PoolSpec(1)})
    step_until(supervisor, lambda: len(supervisor.routes()["p"].ready) == 1)
    [replica] = supervisor.routes()["p"].ready
    results: list[httpx.Response] = []
    body = {"model": "p", "prompt": "x", "max_tokens": 150}  # 1.5 s at 10 ms a token
    long = threading.Thread(
        target=lambda: results.append(
            httpx.post(f"{replica.url}/v1/completions", json=body, headers=replica.auth_headers)
        )
    )
    long.start()
    step_until(
        supervisor,
        lambda: httpx.get(f"{replica.url}/stats", headers=replica.auth_headers).json()["requests"]["in_flight"] == 1,
    )
    supervisor.set_desired(DesiredState.model_validate({"pools": {"p": {"replicas": 0}}}))
    supervisor.step()
    assert phases(supervisor) == [Phase.DRAINING]
    assert supervisor.routes()["p"].ready == ()
    assert (supervisor.replica_counts()["p"].ready, supervisor.replica_counts()["p"].draining) == (0, 1)
    step_until(supervisor, lambda: not supervisor._replicas and not supervisor._processes.stopping)
    long.join(10)
    assert results[0].status_code == 200 and results[0].json()["usage"]["completion_tokens"] == 150


def test_a_crashed_replica_is_counted_and_restarted_after_its_backoff(
    make_supervisor: Callable[..., tuple[Supervisor, CollectorRegistry]],
) -> None:
    supervisor, registry = make_supervisor({"p": PoolSpec(1)}, Timing(backoff_base_s=0.5))
    step_until(supervisor, lambda: len(supervisor.routes()["p"].ready) == 1)
    [replica] = supervisor._replicas
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGKILL)
    step_until(supervisor, lambda: phases(supervisor) == [Phase.BACKOFF])
    assert registry.get_sample_value("fleetpilot_agent_replica_crashes_total", {"pool": "p"}) == 1
    assert registry.get_sample_value("fleetpilot_agent_replicas", {"pool": "p", "phase": "backoff"}) == 1
    assert supervisor.routes()["p"].ready == () and supervisor.routes()["p"].consecutive_crashes == 1
    step_until(supervisor, lambda: len(supervisor.routes()["p"].ready) == 1)
    assert supervisor._replicas[0].view.crashes == 1
