"""The node's report: the supervisor's replicas by phase (ready, starting, draining), crash loops and measured startup
time, with fake processes and a fake clock; then the report built from them, bounded as the wire is."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry

from inference_agent.isolation.limits import AppliedLimits, ReplicaLimits
from inference_agent.serving.reporting.report import node_report
from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.supervision.launcher import LaunchSpec
from inference_agent.serving.supervision.pools import PoolSpec
from inference_agent.serving.supervision.supervisor import ReplicaCounts, Supervisor
from wire.control import MAX_POOLS, MAX_TENANTS_PER_POOL, DesiredState, NodeReport, TenantUsage


@dataclass
class FakeProcess:
    pid: int
    code: int | None = None

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.code = 0

    def kill(self) -> None:
        self.code = -9


class FakeLauncher:
    def __init__(self) -> None:
        self.processes: dict[str, FakeProcess] = {}

    def launch(self, spec: LaunchSpec) -> FakeProcess:
        self.processes[spec.replica_id] = FakeProcess(1000 + len(self.processes))
        return self.processes[spec.replica_id]

    def log_tail(self, replica_id: str, lines: int = 20) -> str:
        return ""


class NoLimits:
    def apply(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        return AppliedLimits(replica_id, pid)

    def verify(self, replica_id: str, pid: int, limits: ReplicaLimits) -> AppliedLimits:
        return AppliedLimits(replica_id, pid)

    def release(self, replica_id: str) -> None:
        pass


class Replicas:
    """Every replica's loopback answers: /healthz 200 once ``warm``, /stats with nothing in flight, /drain taken."""

    def __init__(self) -> None:
        self.warm = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/healthz":
            return httpx.Response(200 if self.warm else 503)
        return httpx.Response(200, json={"requests": {"in_flight": 1}})  # a draining replica still busy


def supervisor_of(pools: dict[str, PoolSpec]) -> tuple[Supervisor, Replicas, list[float], CollectorRegistry]:
    replicas, now, registry = Replicas(), [100.0], CollectorRegistry()
    supervisor = Supervisor(
        pools,
        FakeLauncher(),
        ServingTelemetry(registry),
        cpus=(0,),
        cpu_limits=NoLimits(),
        clock=lambda: now[0],
        client=httpx.Client(transport=httpx.MockTransport(replicas.handle)),
    )
    return supervisor, replicas, now, registry


def test_replica_counts_follow_the_replicas_through_start_ready_drain_and_crash() -> None:
    supervisor, replicas, now, registry = supervisor_of({"p": PoolSpec(2)})
    supervisor.step()
    assert supervisor.replica_counts() == {"p": ReplicaCounts(starting=2)}  # launched, not warm: no startup yet

    now[0] += 12.5
    replicas.warm = True
    supervisor.step()
    assert supervisor.replica_counts() == {"p": ReplicaCounts(ready=2, startup_seconds=12.5)}
    assert registry.get_sample_value("fleetpilot_agent_replica_startup_seconds", {"pool": "p"}) == 12.5

    supervisor.set_desired(DesiredState.model_validate({"pools": {"p": {"replicas": 1}}}))
    supervisor.step()
    assert supervisor.replica_counts() == {"p": ReplicaCounts(ready=1, draining=1, startup_seconds=12.5)}

    [serving] = [r for r in supervisor._replicas if r.view.phase == "ready"]
    assert serving.process is not None
    serving.process.code = 3  # type: ignore[attr-defined]  # it crashes
    supervisor.step()
    counts = supervisor.replica_counts()["p"]
    assert (counts.ready, counts.consecutive_crashes) == (0, 1)  # in back-off: neither ready nor starting


def test_a_removed_pools_draining_replicas_are_still_reported() -> None:
    supervisor, replicas, now, _ = supervisor_of({"p": PoolSpec(1), "gone": PoolSpec(1)})
    replicas.warm = True
    supervisor.step()
    now[0] += 3.0
    supervisor.step()
    supervisor.set_desired(DesiredState.model_validate({"pools": {"p": {"replicas": 1}}}))
    supervisor.step()
    assert supervisor.replica_counts()["gone"] == ReplicaCounts(draining=1, startup_seconds=3.0)


def test_the_report_carries_each_pools_counts_and_tenants() -> None:
    counts = {"chat": ReplicaCounts(2, 1, 1, 0, 41.2), "idle": ReplicaCounts()}
    usage = {"chat": {"acme": TenantUsage(requests_per_second=3.5, kv_blocks=96)}, "elsewhere": {}}
    report = node_report(1764424800.5, counts, usage)
    assert report.model_dump(mode="json", exclude_none=True) == {
        "ts": 1764424800.5,
        "pools": {
            "chat": {
                "ready": 2,
                "starting": 1,
                "draining": 1,
                "consecutive_crashes": 0,
                "startup_seconds": 41.2,
                "tenants": {"acme": {"requests_per_second": 3.5, "kv_blocks": 96.0}},
            },
            "idle": {"ready": 0, "starting": 0, "draining": 0, "consecutive_crashes": 0, "tenants": {}},
        },
    }
    assert NodeReport.model_validate(report.model_dump(mode="json")) == report  # what the server reads back


def test_the_report_is_bounded_as_the_wire_is() -> None:
    pools = {f"empty-{i:03d}": ReplicaCounts() for i in range(MAX_POOLS)} | {"zz-busy": ReplicaCounts(ready=1)}
    tenants = {f"t{i}": TenantUsage(requests_per_second=float(i)) for i in range(MAX_TENANTS_PER_POOL + 10)}
    report = node_report(1.0, pools, {"zz-busy": tenants})
    assert len(report.pools) == MAX_POOLS and "zz-busy" in report.pools  # a pool with replicas is never cut
    kept = report.pools["zz-busy"].tenants
    assert len(kept) == MAX_TENANTS_PER_POOL and "t0" not in kept and f"t{MAX_TENANTS_PER_POOL + 9}" in kept
