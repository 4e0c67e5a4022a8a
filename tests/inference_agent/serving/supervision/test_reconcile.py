"""Supervisor decisions as pure functions: scale up and down, drain, crash back-off, kind changes; replica quotas; pools
and their bounds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from inference_agent.serving.supervision.launcher import LaunchSpec, ReplicaProcess
from inference_agent.serving.supervision.pools import (
    BUILTIN_OFFERS,
    DesiredRefused,
    NodeOffer,
    PoolSpec,
    RefusalReason,
    desired_refusal,
    parse_pools,
    pools_from_desired,
    with_limits,
)
from inference_agent.serving.supervision.quota import GpuQuota, cpu_share, mps_daemon_running, replica_environment
from inference_agent.serving.supervision.reconcile import (
    Action,
    Phase,
    ReplicaView,
    Timing,
    backoff_s,
    crashed,
    decide,
    settled,
)
from inference_agent.serving.supervision.supervisor import Supervisor
from wire.control import MAX_POOLS, DesiredState, PoolDesired, PoolLimits

T = Timing(drain_deadline_s=20, startup_timeout_s=60, backoff_base_s=1, backoff_cap_s=60, stable_after_s=60)


def view(rid: str, phase: Phase, since: float = 0.0, **kw: object) -> ReplicaView:
    return ReplicaView(rid, "p", str(kw.pop("kind", "text")), phase, since, **kw)  # type: ignore[arg-type]


def verbs(actions: list[Action]) -> list[tuple[str, str | None, str]]:
    return [(a.verb.value, a.replica_id, a.reason.value) for a in actions]


def test_scale_up_starts_the_missing_replicas() -> None:
    actions = decide({"p": PoolSpec(3)}, [view("a", Phase.READY)], 10.0, T)
    assert verbs(actions) == [("start", None, "ScaleUp")] * 2


def test_scale_down_takes_backoff_then_starting_then_least_busy_newest_ready() -> None:
    replicas = [
        view("busy", Phase.READY, since=1, in_flight=5),
        view("idle-old", Phase.READY, since=1),
        view("idle-new", Phase.READY, since=2),
        view("warming", Phase.STARTING, since=3),
        view("crashed", Phase.BACKOFF, since=3, crashes=1, restart_at=100.0),
    ]
    assert verbs(decide({"p": PoolSpec(2)}, replicas, 10.0, T)) == [
        ("forget", "crashed", "ScaleDown"),
        ("stop", "warming", "ScaleDown"),
        ("drain", "idle-new", "ScaleDown"),
    ]


def test_draining_replicas_stop_when_idle_or_at_the_deadline_and_do_not_count() -> None:
    replicas = [view("d1", Phase.DRAINING, since=0, in_flight=0), view("d2", Phase.DRAINING, since=0, in_flight=2)]
    assert verbs(decide({"p": PoolSpec(1)}, replicas, 5.0, T)) == [
        ("stop", "d1", "Drained"),
        ("start", None, "ScaleUp"),  # draining ones are on their way out
    ]
    assert ("stop", "d2", "DrainDeadline") in verbs(decide({"p": PoolSpec(0)}, replicas, 20.0, T))


def test_a_removed_pool_drains_everything() -> None:
    assert verbs(decide({}, [view("a", Phase.READY)], 1.0, T)) == [("drain", "a", "PoolRemoved")]


def test_a_kind_change_replaces_the_replicas() -> None:
    actions = decide({"p": PoolSpec(1, "classify")}, [view("a", Phase.READY)], 1.0, T)
    assert verbs(actions) == [("drain", "a", "KindChanged"), ("start", None, "ScaleUp")]
    assert actions[1].kind == "classify"


def test_crash_backoff_doubles_and_restarts_when_it_elapsed() -> None:
    assert [backoff_s(n, T) for n in (1, 2, 3, 7, 8)] == [1, 2, 4, 60, 60]
    after = crashed(view("a", Phase.READY, in_flight=3), 10.0, T)
    assert (after.phase, after.crashes, after.restart_at, after.in_flight) == (Phase.BACKOFF, 1, 11.0, 0)
    assert decide({"p": PoolSpec(1)}, [after], 10.5, T) == []  # still waiting, and it counts: no new start
    assert verbs(decide({"p": PoolSpec(1)}, [after], 11.0, T)) == [("restart", "a", "BackoffElapsed")]
    again = crashed(after, 12.0, T)
    assert (again.crashes, again.restart_at) == (2, 14.0)


def test_a_minute_ready_clears_the_crash_count() -> None:
    ready = view("a", Phase.READY, since=100.0, crashes=4)
    assert settled(ready, 159.0, T).crashes == 4
    assert settled(ready, 160.0, T).crashes == 0


def test_a_replica_never_warm_fails_once_not_twice() -> None:
    stuck = view("s", Phase.STARTING, since=0.0)
    assert verbs(decide({"p": PoolSpec(0)}, [stuck], 60.0, T)) == [("fail", "s", "StartupTimeout")]
    assert verbs(decide({"p": PoolSpec(1)}, [stuck], 60.0, T)) == [("fail", "s", "StartupTimeout")]


@pytest.mark.parametrize(
    ("slot", "slots", "cpus", "share"),
    [
        (0, 2, (0, 1, 2, 3), (0, 1)),
        (1, 2, (0, 1, 2, 3), (2, 3)),
        (2, 3, (0, 1), (0,)),  # more replicas than cores: they share
        (0, 0, (4, 5), (4, 5)),
    ],
)
def test_cpu_share(slot: int, slots: int, cpus: tuple[int, ...], share: tuple[int, ...]) -> None:
    assert cpu_share(slot, slots, cpus) == share


def test_replica_environment_on_cpu_and_with_mps() -> None:
    assert replica_environment(slot=1, slots=2, cpus=(0, 1, 2, 3), device="cpu", mps=True) == {
        "FLEETPILOT_REPLICA_CPUS": "2,3",
        "FLEETPILOT_REPLICA_THREADS": "2",
    }
    env = replica_environment(
        slot=0,
        slots=1,
        cpus=(0,),
        device="cuda",
        mps=True,
        gpu_quota=GpuQuota(active_thread_percentage=25, gpu_memory_mib=4096),
    )
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    no_mps = replica_environment(slot=0, slots=1, cpus=(0,), device="cuda", mps=False, gpu_quota=GpuQuota(25, 4096))
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in no_mps


def test_mps_daemon_detection() -> None:
    assert mps_daemon_running({}, lambda path: path == "/tmp/nvidia-mps/control")
    assert mps_daemon_running({"CUDA_MPS_PIPE_DIRECTORY": "/x"}, lambda path: path == "/x/control")
    assert not mps_daemon_running({}, lambda _path: False)


def test_pools_setting() -> None:
    assert parse_pools("a=text:1, b=classify:2") == {"a": PoolSpec(1, "text"), "b": PoolSpec(2, "classify")}
    assert parse_pools("") == {}
    for bad in ("a=text", "a=video:1", "a=text:1,a=text:2", "=text:1"):
        with pytest.raises(ValueError):
            parse_pools(bad)


def desired(body: dict[str, Any]) -> DesiredState:
    return DesiredState.model_validate(body)


def test_pools_from_desired() -> None:
    current = {"c": PoolSpec(1, "classify")}
    offer = NodeOffer(BUILTIN_OFFERS)
    assert pools_from_desired(desired({"tenants": {}}), current, offer) is None
    got = pools_from_desired(desired({"pools": {"c": {"replicas": 3}, "t": {"replicas": 1}}}), current, offer)
    assert got == {"c": PoolSpec(3, "classify"), "t": PoolSpec(1, "text")}  # a kind left out: what it runs as now
    switched = pools_from_desired(desired({"pools": {"c": {"replicas": 1, "kind": "text"}}}), current, offer)
    assert switched == {"c": PoolSpec(1)}


def pools_of(count: int, replicas: int) -> DesiredState:
    """Built without the wire's checks, to reach the node's own bounds past them (1,000 pools)."""
    return DesiredState.model_construct(pools={f"p{i}": PoolDesired(replicas=replicas) for i in range(count)})


@pytest.mark.parametrize(
    ("state", "refusal"),
    [
        (DesiredState(), None),
        (pools_of(2, 32), None),  # 64 in all: the bound itself
        (pools_of(MAX_POOLS, 0), None),  # many pools scaled to zero
        (pools_of(2, 40), RefusalReason.TOO_MANY_REPLICAS),  # 80 > 64
        (pools_of(1, 10**12), RefusalReason.TOO_MANY_REPLICAS),
    ],
)
def test_desired_counts_are_bounded(state: DesiredState, refusal: RefusalReason | None) -> None:
    got = desired_refusal(state, max_replicas=64)
    assert (got.reason if got else None) == refusal


@pytest.mark.parametrize("field", ["pools", "pool_limits"])
def test_more_pools_than_allowed_are_refused_where_the_state_is_parsed(field: str) -> None:
    """The attack of 1,000 pools × 64 replicas (64,000 starts) never reaches the node's counts."""
    body = {f"p{i}": {"replicas": 64} if field == "pools" else {} for i in range(MAX_POOLS + 1)}
    with pytest.raises(ValidationError, match=field):
        desired({field: body})


def test_pools_from_desired_refuses_more_replicas_than_the_node_runs() -> None:
    with pytest.raises(DesiredRefused, match="80 replicas in all"):
        pools_from_desired(pools_of(2, 40), {}, NodeOffer(BUILTIN_OFFERS))
    wider = NodeOffer(BUILTIN_OFFERS, max_replicas=80)
    assert pools_from_desired(pools_of(2, 40), {}, wider) == {"p0": PoolSpec(40), "p1": PoolSpec(40)}


class RefusingLauncher:
    """A launcher no test here should reach."""

    def launch(self, spec: LaunchSpec) -> ReplicaProcess:
        raise AssertionError(f"launched {spec.replica_id}")

    def log_tail(self, replica_id: str, lines: int = 20) -> str:
        return ""


def test_a_desired_state_past_max_replicas_is_refused_whole() -> None:
    supervisor = Supervisor({"a": PoolSpec(0)}, RefusingLauncher(), max_replicas=8)
    with pytest.raises(DesiredRefused, match="pools: 9 replicas in all") as refused:
        supervisor.set_desired(desired({"pools": {"a": {"replicas": 5}, "b": {"replicas": 4}}}))  # 9 > 8
    assert refused.value.reason is RefusalReason.TOO_MANY_REPLICAS
    assert supervisor.target() == {"a": PoolSpec(0)}
    supervisor.set_desired(desired({"pools": {"a": {"replicas": 4}, "b": {"replicas": 4}}}))
    assert supervisor.target() == {"a": PoolSpec(4), "b": PoolSpec(4)}


def test_configured_pools_past_max_replicas_are_refused_at_start() -> None:
    with pytest.raises(ValueError, match="9 replicas in all"):
        Supervisor({"a": PoolSpec(9)}, RefusingLauncher(), max_replicas=8)


def test_pool_limits_from_desired_apply_to_the_pools_with_the_nodes_cores() -> None:
    limits = desired(
        {"pool_limits": {"t": {"cpu_share": 0.125}, "g": {"active_thread_percentage": 30, "gpu_memory_mib": 512}}}
    ).pool_limits
    pools = {"t": PoolSpec(1), "g": PoolSpec(2), "free": PoolSpec(1)}
    assert with_limits(pools, limits, cores=2) == {
        "t": PoolSpec(1, cpu_millicores=250),  # 1/8 of 2 cores
        "g": PoolSpec(2, gpu_quota=GpuQuota(30, 512)),
        "free": PoolSpec(1),
    }
    assert with_limits({"t": PoolSpec(1)}, {"t": PoolLimits(cpu_share=0.001)}, cores=2)["t"].cpu_millicores == 10


def test_agent_settings_take_builtin_and_its_pools(tmp_path: object) -> None:
    from inference_agent.settings import AgentSettings, WorkloadSpec

    assert WorkloadSpec.parse("builtin") == WorkloadSpec("builtin")
    settings = AgentSettings(
        collector="http://c", token="agent-token", workload="builtin", pools="a=text:2,b=classify:1", serve_port=0
    )
    assert settings.pool_specs == {"a": PoolSpec(2, "text"), "b": PoolSpec(1, "classify")}
    with pytest.raises(ValueError, match="NAME=KIND:REPLICAS"):
        AgentSettings(collector="http://c", token="agent-token", pools="a=gpu:1")


def test_new_gpu_limits_replace_the_replicas_without_losing_capacity() -> None:
    old, new = GpuQuota(50, None), GpuQuota(30, None)
    spec = {"p": PoolSpec(2, gpu_quota=new)}
    serving = [view("a", Phase.READY, gpu_quota=old), view("b", Phase.READY, 1.0, gpu_quota=old)]
    assert verbs(decide(spec, serving, 10.0, T)) == [("start", None, "ScaleUp")] * 2  # the old keep serving
    one_ready = [*serving, view("c", Phase.READY, 11.0, gpu_quota=new), view("d", Phase.STARTING, 11.0, gpu_quota=new)]
    assert verbs(decide(spec, one_ready, 12.0, T)) == [("drain", "b", "LimitsChanged")]  # newest old first
    both = [serving[0], view("c", Phase.READY, 11.0, gpu_quota=new), view("d", Phase.READY, 12.0, gpu_quota=new)]
    assert verbs(decide(spec, both, 13.0, T)) == [("drain", "a", "LimitsChanged")]
    warming = [view("a", Phase.STARTING, gpu_quota=old), view("b", Phase.BACKOFF, gpu_quota=old)]
    assert verbs(decide({"p": PoolSpec(1, gpu_quota=new)}, warming, 1.0, T)) == [
        ("start", None, "ScaleUp"),
        ("stop", "a", "LimitsChanged"),
        ("forget", "b", "LimitsChanged"),
    ]
