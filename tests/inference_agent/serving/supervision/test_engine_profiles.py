"""The supervisor running an engine profile: the node's own command (here the built-in replica started as an external
process, answering vLLM's /health and /metrics), ready only once its health path answers, drained by routing nothing
new to it, restarted with back-off after a SIGKILL, given GPUs of its own, and read through its engine's adapter."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference_agent.config import EngineProfile
from inference_agent.probes.base import Reading
from inference_agent.serving.reporting.engine_replicas import EngineReplicasProbe, combine
from inference_agent.serving.supervision.launcher import LaunchSpec, ProcessLauncher
from inference_agent.serving.supervision.pools import DesiredRefused, PoolSpec, RefusalReason
from inference_agent.serving.supervision.reconcile import Phase, Timing
from inference_agent.serving.supervision.supervisor import Supervisor
from tests.support.supervising import step_until
from wire.control import DesiredState

BUILTIN_AS_PROFILE = EngineProfile(
    command=[
        "{python}",
        "-m",
        "inference_agent.serving.replica",
        *("--pool", "{pool}", "--kind", "text", "--port", "{port}", "--engine", "fake"),
        *("--served-model-name", "{model}", "--token-delay-s", "0.01"),
    ],
    health_path="/health",
    metrics_kind="vllm",
    models=["tiny-chat"],
    startup_timeout_seconds=60,
    drain_grace_seconds=10,
)


def profile_pool(replicas: int, **fields: object) -> DesiredState:
    pool = {"replicas": replicas, "engine": "builtin-vllm", "model": "tiny-chat", **fields}
    return DesiredState.model_validate({"pools": {"chat": pool}})


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    made = Supervisor(
        {},
        ProcessLauncher(tmp_path / "logs"),
        timing=Timing(backoff_base_s=0.5),
        cpus=(0, 1),
        builtin=False,
        profiles={"builtin-vllm": BUILTIN_AS_PROFILE},
    )
    yield made
    made.shutdown(5.0)


def ready(supervisor: Supervisor) -> int:
    routes = supervisor.routes().get("chat")
    return len(routes.ready) if routes else 0


@pytest.mark.slow
def test_a_profile_replica_runs_the_declared_command_and_is_ready_on_its_health_path(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    supervisor.set_desired(profile_pool(1))
    step_until(supervisor, lambda: ready(supervisor) == 1)
    routes = supervisor.routes()["chat"]
    assert (routes.engine, routes.served_model, routes.metrics_kind, routes.kind) == (
        "builtin-vllm",
        "tiny-chat",
        "vllm",
        "text",
    )
    endpoint = routes.ready[0]
    body = {"model": "tiny-chat", "prompt": "hi", "max_tokens": 4}
    answer = httpx.post(f"{endpoint.url}/v1/completions", json=body, headers=endpoint.auth_headers)
    assert answer.status_code == 200
    log = (tmp_path / "logs" / f"{endpoint.replica_id}.log").read_text()
    assert "inference_agent.serving.replica --pool chat --kind text --port" in log  # the command, first line
    assert supervisor.replica_counts()["chat"].startup_seconds is not None


@pytest.mark.slow
def test_scale_down_drains_a_profile_replica_only_once_its_requests_finished(supervisor: Supervisor) -> None:
    in_flight: dict[str, int] = {}
    supervisor.load = lambda replica_id: in_flight.get(replica_id, 0)
    supervisor.set_desired(profile_pool(2))
    step_until(supervisor, lambda: ready(supervisor) == 2)
    busy = supervisor.routes()["chat"].ready[0].replica_id
    idle = supervisor.routes()["chat"].ready[1].replica_id
    in_flight[busy] = 3  # the front end has 3 requests there...
    supervisor.set_desired(profile_pool(1))
    supervisor.step()
    assert [e.replica_id for e in supervisor.routes()["chat"].ready] == [busy]  # ... so the idle one goes first
    supervisor.set_desired(profile_pool(0))
    for _ in range(10):
        supervisor.step()
    draining = [r for r in supervisor._replicas if r.view.id == busy]
    assert draining and draining[0].view.phase is Phase.DRAINING  # not routed, still running
    assert draining[0].process is not None and draining[0].process.poll() is None
    in_flight[busy] = 0
    step_until(supervisor, lambda: not supervisor._replicas)
    assert idle not in {r.view.id for r in supervisor._replicas}


@pytest.mark.slow
def test_a_killed_profile_replica_is_restarted_after_its_back_off(supervisor: Supervisor) -> None:
    supervisor.set_desired(profile_pool(1))
    step_until(supervisor, lambda: ready(supervisor) == 1)
    replica = supervisor._replicas[0]
    assert replica.process is not None
    first_pid = replica.process.pid
    os.kill(first_pid, signal.SIGKILL)
    step_until(supervisor, lambda: supervisor._replicas[0].view.phase is Phase.BACKOFF, timeout_s=5)
    assert supervisor.replica_counts()["chat"].consecutive_crashes == 1
    step_until(supervisor, lambda: ready(supervisor) == 1)
    assert supervisor._replicas[0].process is not None and supervisor._replicas[0].process.pid != first_pid


@pytest.mark.slow
def test_the_engine_adapter_reads_a_profile_replica_through_vllm_names(supervisor: Supervisor) -> None:
    supervisor.set_desired(profile_pool(1))
    step_until(supervisor, lambda: ready(supervisor) == 1)
    probe = EngineReplicasProbe(supervisor.routes)
    try:
        probe.read()  # the first scrape: no rates yet
        endpoint = supervisor.routes()["chat"].ready[0]
        threads = [
            threading.Thread(
                target=httpx.post,
                args=(f"{endpoint.url}/v1/completions",),
                kwargs={
                    "json": {"model": "tiny-chat", "prompt": "x", "max_tokens": 8},
                    "headers": endpoint.auth_headers,
                    "timeout": 10,
                },
            )
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (reading,) = probe.read()
    finally:
        probe.close()
    assert reading.pool == "chat"
    assert reading.metrics["request_rate_per_second"] > 0
    assert reading.metrics["token_throughput_per_second"] > 0
    assert reading.metrics["queue_depth_requests"] == 0
    assert reading.extra["replica_consecutive_crashes"] == 0


class RecordingLauncher:
    """Launches nothing real: records each spec, answers a process that never exits."""

    def __init__(self) -> None:
        self.specs: list[LaunchSpec] = []

    def launch(self, spec: LaunchSpec) -> _Forever:
        self.specs.append(spec)
        return _Forever(1000 + len(self.specs))

    def log_tail(self, replica_id: str, lines: int = 20) -> str:
        return ""


class _Forever:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def gpu_supervisor(launcher: RecordingLauncher) -> Supervisor:
    return Supervisor(
        {},
        launcher,
        cpus=(0, 1),
        builtin=False,
        profiles={"builtin-vllm": BUILTIN_AS_PROFILE},
        gpu_memory_mib={0: 81_559, 1: 81_559, 2: 81_559},
        client=httpx.Client(transport=httpx.MockTransport(lambda _r: httpx.Response(503))),
    )


def test_each_replica_gets_gpus_of_its_own_and_the_next_waits_for_free_ones() -> None:
    launcher = RecordingLauncher()
    supervisor = gpu_supervisor(launcher)
    supervisor.set_desired(profile_pool(2, gpus=1, gpu_memory_mib=40_960))
    supervisor.step()
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in launcher.specs] == ["0", "1"]
    # the command holds the pool's memory over the GPU's: 40,960 / 81,559 MiB
    assert "--served-model-name" in (launcher.specs[0].command or ())
    supervisor.set_desired(profile_pool(2, gpus=2))  # replaces both; GPUs 0 and 1 stay held until their processes
    supervisor.step()  # exit, and these never do: only GPU 2 is free, one short of a replica
    assert len(launcher.specs) == 2


def test_gpu_memory_fraction_is_the_pools_memory_over_the_assigned_gpus() -> None:
    profile = BUILTIN_AS_PROFILE.model_copy(
        update={"command": [*BUILTIN_AS_PROFILE.command, "--fraction", "{gpu_memory_fraction}", "--tp", "{gpus}"]}
    )
    launcher = RecordingLauncher()
    supervisor = gpu_supervisor(launcher)
    supervisor.profiles = {"builtin-vllm": profile}
    supervisor.set_desired(profile_pool(1, gpus=2, gpu_memory_mib=40_960))
    supervisor.step()
    command = list(launcher.specs[0].command or ())
    assert command[command.index("--fraction") + 1] == "0.5022"
    assert command[command.index("--tp") + 1] == "2"
    assert launcher.specs[0].env["CUDA_VISIBLE_DEVICES"] == "0,1"


@pytest.mark.parametrize(
    ("pool", "reason", "says"),
    [
        ({"engine": "sglang", "model": "tiny-chat"}, RefusalReason.UNKNOWN_ENGINE, "engine 'sglang' is not declared"),
        ({"engine": "builtin-vllm", "model": "other"}, RefusalReason.UNKNOWN_MODEL, "may not serve model 'other'"),
        ({"engine": "builtin-vllm"}, RefusalReason.UNKNOWN_MODEL, "may not serve model None"),
        ({"kind": "text"}, RefusalReason.UNKNOWN_ENGINE, "the built-in 'text' engine is not declared"),
        ({"engine": "builtin-vllm", "model": "tiny-chat", "gpus": 4}, RefusalReason.TOO_MANY_GPUS, "this node has 3"),
    ],
)
def test_what_the_node_did_not_declare_is_refused_and_nothing_starts(
    pool: dict[str, object], reason: RefusalReason, says: str
) -> None:
    launcher = RecordingLauncher()
    supervisor = gpu_supervisor(launcher)
    state = DesiredState.model_validate({"pools": {"chat": {"replicas": 1, **pool}}})
    with pytest.raises(DesiredRefused, match=says) as refused:
        supervisor.set_desired(state)
    assert refused.value.reason is reason
    supervisor.step()
    assert launcher.specs == [] and supervisor.target() == {}


def test_a_pool_restated_without_engine_keeps_running_its_profile() -> None:
    supervisor = gpu_supervisor(RecordingLauncher())
    supervisor.set_desired(profile_pool(2))
    supervisor.set_desired(DesiredState.model_validate({"pools": {"chat": {"replicas": 1}}}))
    assert supervisor.target()["chat"] == PoolSpec(1, "text", engine="builtin-vllm", model="tiny-chat")


def test_replicas_of_a_pool_combine_as_the_fleet_does() -> None:
    a = Reading(
        {
            "request_rate_per_second": 8,
            "queue_depth_requests": 3,
            "request_latency_p99_seconds": 1.2,
            "kv_cache_utilization_ratio": 0.9,
        },
        pool="chat",
        extra={"requests_running": 5},
    )
    b = Reading(
        {
            "request_rate_per_second": 6,
            "queue_depth_requests": 0,
            "request_latency_p99_seconds": 0.4,
            "kv_cache_utilization_ratio": 0.2,
        },
        pool="chat",
        extra={"requests_running": 2},
        error="b: slow",
    )
    combined = combine("chat", [a, b], queued=2)
    assert combined.metrics == {
        "request_rate_per_second": 14,
        "queue_depth_requests": 5,
        "request_latency_p99_seconds": 1.2,
        "kv_cache_utilization_ratio": 0.9,
    }
    assert combined.extra == {"requests_running": 7}
    assert combined.error == "b: slow"
    assert "token_throughput_per_second" not in combined.metrics  # nobody measured it: absent, not 0
