"""A real agent process pushing to a real server process: outages and kills lose nothing and duplicate nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select

from collector.database import make_engine
from collector.tables import samples
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.spool import Spool

pytestmark = pytest.mark.slow
NODE = "node-e2e"


@dataclass
class Fleet:
    tmp: Path
    server: ServerProcess
    token: str

    @property
    def spool_dir(self) -> Path:
        return self.tmp / "agent-spool"

    def start_agent(self) -> AgentProcess:
        return AgentProcess(
            collector=self.server.url,
            token=self.token,
            node_id=NODE,
            spool_dir=self.spool_dir,
            gpu_probe="none",
            env={"FLEETPILOT_SAMPLE_INTERVAL_SECONDS": "0.1", "FLEETPILOT_PUSH_INTERVAL_SECONDS": "0.2"},
            log_path=self.tmp / "agent.log",
        ).start()

    def stored(self) -> tuple[int, int, int]:
        """(rows, min seq, max seq) stored for the node."""
        engine = make_engine(self.server.database_url)
        try:
            with engine.connect() as conn:
                row = conn.execute(
                    select(func.count(), func.min(samples.c.seq), func.max(samples.c.seq)).where(
                        samples.c.node_id == NODE
                    )
                ).one()
        finally:
            engine.dispose()
        return int(row[0]), int(row[1] or 0), int(row[2] or 0)

    def wait_for_rows(self, at_least: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.stored()[0] >= at_least:
                return
            time.sleep(0.2)
        raise AssertionError(f"fewer than {at_least} rows after {timeout_s} s:\n{self.agent_log()}")

    def agent_log(self) -> str:
        return (self.tmp / "agent.log").read_text(errors="replace")[-4000:]

    def assert_every_sample_exactly_once(self) -> None:
        spool = Spool(self.spool_dir / "samples")
        assert spool.pending == 0, self.agent_log()
        rows, first, last = self.stored()
        assert first == 1
        assert last == spool.acked_seq
        assert rows == last  # seq 1..last, each once (the primary key forbids twice; the count forbids gaps)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    server = ServerProcess(f"sqlite:///{tmp_path}/e2e.db")
    with server:
        yield Fleet(tmp_path, server, server.create_agent_token(NODE))


def stop_agent(agent: AgentProcess) -> None:
    assert agent.stop(timeout_s=30) == 0  # SIGTERM: flush, then a clean exit


def test_collector_killed_for_five_seconds_loses_nothing(fleet: Fleet) -> None:
    agent = fleet.start_agent()
    try:
        fleet.wait_for_rows(10)
        fleet.server.kill()
        time.sleep(5)
        fleet.server.start()
        before = fleet.stored()[0]
        fleet.wait_for_rows(before + 20)
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()


def test_agent_killed_mid_outage_and_restarted_loses_nothing(fleet: Fleet) -> None:
    agent = fleet.start_agent()
    try:
        fleet.wait_for_rows(10)
        fleet.server.kill()
        time.sleep(2)
        agent.kill()  # SIGKILL: no flush, samples only in the spool
        agent = fleet.start_agent()
        time.sleep(2)
        fleet.server.start()
        before = fleet.stored()[0]
        fleet.wait_for_rows(before + 40)
    finally:
        stop_agent(agent)
    fleet.assert_every_sample_exactly_once()
