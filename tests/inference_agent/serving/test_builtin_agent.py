"""A real agent with ``--workload builtin`` (torch engine) pushing to a real server: completions answered through its
serving port, the pool's serving metrics stored, its report of the pool's replicas stored, and SIGTERM drains and
exits cleanly."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from collector.database import make_engine
from collector.tables import node_reports, samples
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.ports import free_port
from wire.control import NodeReport

pytestmark = pytest.mark.slow
NODE = "node-builtin"


def wait_for(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout_s} s")


def pool_rates(database_url: str) -> list[float]:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(samples.c.request_rate_per_second).where(
                    samples.c.node_id == NODE, samples.c.pool == "text-small"
                )
            ).all()
    finally:
        engine.dispose()
    return [r[0] for r in rows if r[0] is not None]


def stored_report(database_url: str) -> NodeReport | None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            body = conn.execute(select(node_reports.c.report).where(node_reports.c.node_id == NODE)).scalar()
    finally:
        engine.dispose()
    return None if body is None else NodeReport.model_validate(body)


def test_builtin_agent_serves_completions_and_its_metrics_arrive(tmp_path: Path) -> None:
    with ServerProcess(f"sqlite:///{tmp_path}/e2e.db") as server:
        serve_port = free_port()
        agent = AgentProcess(
            collector=server.url,
            token=server.create_agent_token(NODE),
            node_id=NODE,
            spool_dir=tmp_path / "spool",
            gpu_probe="none",
            workload="builtin",
            pools="text-small=text:1",
            serve_port=serve_port,
            env={
                "FLEETPILOT_SAMPLE_INTERVAL_SECONDS": "0.2",
                "FLEETPILOT_PUSH_INTERVAL_SECONDS": "0.2",
            },
            log_path=tmp_path / "agent.log",
        ).start()
        try:
            serve = f"http://127.0.0.1:{serve_port}"

            def ready() -> bool:
                try:
                    pools = httpx.get(f"{serve}/healthz").json()["pools"]
                except httpx.HTTPError:
                    return False
                return bool(pools["text-small"]["ready"] == 1)

            wait_for(ready, 120, "a warm replica")
            for _ in range(20):
                done = httpx.post(
                    f"{serve}/v1/completions", json={"model": "text-small", "prompt": "hi", "max_tokens": 3}
                )
                assert done.status_code == 200, done.text
            assert 1 <= done.json()["usage"]["completion_tokens"] <= 3  # random weights may emit end-of-text early
            assert httpx.post(f"{serve}/v1/completions", json={"model": "nope", "prompt": "x"}).status_code == 404
            wait_for(lambda: any(rate > 0 for rate in pool_rates(server.database_url)), 30, "a request rate")
            metrics = httpx.get(f"{agent.metrics_url}/metrics").text
            assert 'fleetpilot_agent_replicas{phase="ready",pool="text-small"} 1.0' in metrics
            assert 'fleetpilot_agent_replica_startup_seconds{pool="text-small"}' in metrics
            wait_for(lambda: stored_report(server.database_url) is not None, 10, "the node's report")
            report = stored_report(server.database_url)
            assert report is not None
            pool = report.pools["text-small"]
            assert (pool.ready, pool.starting, pool.draining) == (1, 0, 0)
            assert pool.startup_seconds is not None and 0 < pool.startup_seconds < 120
        finally:
            code = agent.stop(timeout_s=30)
        assert code == 0, (tmp_path / "agent.log").read_text()[-3000:]
        log = (tmp_path / "agent.log").read_text()
        assert "Traceback" not in log, log[-3000:]
