"""Scale-out: two servers on one PostgreSQL behind a real HAProxy, agents pushing through it. Every acknowledged
sample is stored once, each job that runs once across servers runs once per period, and when the server holding
the jobs is SIGKILLed mid-load its jobs and leases move to the other while the agents' pushes go on."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy import func, select, text

from alerting.evaluator import LEASE_NAME as ALERTING_LEASE
from autoscaler.controller import LEASE_NAME as AUTOSCALER_LEASE
from bench.lib.simulated_agents import PushShape, SimulatedNode
from collector.database import make_engine
from collector.tables import samples
from fleetpilot.launch import ServerProcess
from isolation.enforcer import LEASE_NAME as ENFORCER_LEASE
from migrations import runner
from tests.support.haproxy import HAProxy
from tests.support.lease import holder_pid, lease_holder
from tests.support.postgres import fresh_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
ROLLUP_S = 1.0
FAST = {
    "FLEETPILOT_ROLLUP_INTERVAL_SECONDS": str(ROLLUP_S),
    "FLEETPILOT_RETENTION_INTERVAL_SECONDS": "2",
    "FLEETPILOT_FORECAST_INTERVAL_SECONDS": "2",
    "FLEETPILOT_AUTOSCALE_INTERVAL_SECONDS": "0.5",
    "FLEETPILOT_ENFORCE_INTERVAL_SECONDS": "0.5",
    "FLEETPILOT_LEADER_LEASE_SECONDS": "3",
}
LEASES = (
    *(f"job:{name}" for name in ("rollups", "retention", "forecasts", "alert-history")),
    AUTOSCALER_LEASE,
    ENFORCER_LEASE,
    ALERTING_LEASE,
)
NODES = 6
SHAPE = PushShape(gpus=2, batch_ticks=2)  # 8 rows a push


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        runner.upgrade(url)
        yield url


@dataclass
class Pusher:
    """One node pushing through the balancer as the agent does: the same body again after any failure, the next
    one only after an acknowledgement."""

    node: SimulatedNode
    token: str
    url: str
    acknowledged_seq: int = 0
    accepted: int = 0
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, timeout=10, headers=headers) as client:
            while not self.stop.is_set():
                body = self.node.batch(SHAPE, time.time())
                while True:  # this body until it is acknowledged, or the test ends
                    try:
                        answer = client.post("/api/v1/ingest", json=body)
                        if answer.status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    self.failures += 1
                    if self.stop.wait(0.2):
                        return
                self.node.registered = True
                self.accepted += answer.json()["accepted"]
                self.acknowledged_seq = self.node.seq
                self.stop.wait(0.1)


def job_runs(server: ServerProcess) -> dict[str, float]:
    """``fleetpilot_jobs_runs_total`` by job, read from this one server (not through the balancer)."""
    exposition = httpx.get(f"{server.url}/metrics", timeout=5).text
    return {
        m[1]: float(m[2]) for m in re.finditer(r'^fleetpilot_jobs_runs_total\{job="([^"]+)"\} (\S+)$', exposition, re.M)
    }


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.2)


def test_two_servers_behind_haproxy_store_every_sample_once_and_move_the_jobs(
    database_url: str, tmp_path: Path
) -> None:
    first = ServerProcess(database_url, env=dict(FAST), log_path=tmp_path / "first.log", workers=1)
    second = ServerProcess(
        database_url, admin_token=first.admin_token, env=dict(FAST), log_path=tmp_path / "second.log", workers=1
    )
    with first, second, HAProxy([first.port, second.port], tmp_path) as balancer:
        pushers = [
            Pusher(SimulatedNode(f"node-{i}", SHAPE.gpus, seed=i), first.create_agent_token(f"node-{i}"), balancer.url)
            for i in range(NODES)
        ]
        threads = [threading.Thread(target=p.run) for p in pushers]
        for thread in threads:
            thread.start()
        try:
            by_pid = {s.process.pid: s for s in (first, second) if s.process is not None}
            wait_until(lambda: all(lease_holder(database_url, name) for name in LEASES), "every lease held", 20)
            # once per period: over a window both servers together ran rollups about window / period times
            before = {pid: job_runs(s).get("rollups", 0.0) for pid, s in by_pid.items()}
            window_started = time.monotonic()
            time.sleep(5.0)
            after = {pid: job_runs(s).get("rollups", 0.0) for pid, s in by_pid.items()}
            window = time.monotonic() - window_started
            ran = {pid: after[pid] - before[pid] for pid in by_pid}
            holder = by_pid[holder_pid(str(lease_holder(database_url, "job:rollups")))]
            assert holder.process is not None
            assert ran[holder.process.pid] >= window / ROLLUP_S - 2, ran
            assert sum(ran.values()) == ran[holder.process.pid], f"rollups ran on both servers: {ran}"

            survivor = second if holder is first else first
            assert survivor.process is not None
            survivor_pid = survivor.process.pid
            holder.kill()  # SIGKILL mid-load: no lease released, pushes in flight cut off
            wait_until(
                lambda: all(holder_pid(lease_holder(database_url, name) or "-:0") == survivor_pid for name in LEASES),
                "every lease on the survivor",
                20,
            )
            survivor_runs = job_runs(survivor).get("rollups", 0.0)
            wait_until(lambda: job_runs(survivor).get("rollups", 0.0) >= survivor_runs + 2, "rollups on survivor", 10)
            acknowledged_at_kill = [p.acknowledged_seq for p in pushers]
            wait_until(
                lambda: all(p.acknowledged_seq > seq for p, seq in zip(pushers, acknowledged_at_kill, strict=True)),
                "every node's pushes acknowledged again after the kill",
                20,
            )
        finally:
            for pusher in pushers:
                pusher.stop.set()
            for thread in threads:
                thread.join(15)

    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            stored = int(conn.scalar(select(func.count()).select_from(samples)) or 0)
            distinct = int(conn.scalar(text("SELECT count(*) FROM (SELECT DISTINCT node_id, seq FROM samples) k")) or 0)
            for pusher in pushers:
                node = pusher.node.node_id
                upto = (samples.c.node_id == node) & (samples.c.seq <= pusher.acknowledged_seq)
                held = int(conn.scalar(select(func.count()).where(upto)) or 0)
                assert held == pusher.acknowledged_seq, f"{node}: {pusher.acknowledged_seq - held} acknowledged lost"
    finally:
        engine.dispose()
    assert stored == distinct, f"{stored - distinct} samples stored twice"
    assert sum(p.accepted for p in pushers) <= stored  # a push committed as its server died is acknowledged later


def test_one_server_with_two_workers_answers_on_one_port_and_runs_each_job_once(database_url: str) -> None:
    """``--workers 2``: two processes on the one port; rollups still run once a period, on one of them; and
    ``/metrics``, whichever worker answers, counts every worker's runs, so the counter never jumps back."""
    with ServerProcess(database_url, env=dict(FAST), workers=2) as server:
        assert server.process is not None
        wait_until(lambda: lease_holder(database_url, "job:rollups") is not None, "rollups lease held", 20)
        holder = holder_pid(str(lease_holder(database_url, "job:rollups")))
        workers = [p for p in psutil.Process(server.process.pid).children() if p.pid != holder]
        assert holder != server.process.pid and holder in {p.pid for p in psutil.Process(server.process.pid).children()}
        first, started = job_runs(server)["rollups"], time.monotonic()
        counts = [first]
        while time.monotonic() - started < 4.0:
            counts.append(job_runs(server)["rollups"])  # new connections: the kernel spreads them over the workers
        ran = counts[-1] - first
        assert counts == sorted(counts), f"the summed counter went back: {counts}"
        assert 4.0 / ROLLUP_S - 2 <= ran <= 4.0 / ROLLUP_S + 1, f"{ran} runs in 4 s: once a period, on one worker"
        holder_process = psutil.Process(holder)
        server.kill()  # the supervisor SIGKILLed: its workers go with it, none left answering unsupervised
        gone, alive = psutil.wait_procs([holder_process, *workers], timeout=10)
        assert holder in {p.pid for p in gone} and not alive
