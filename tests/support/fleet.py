"""A real ``fleetpilot server`` with real ``fleetpilot agent`` processes pushing to it, and the count that proves
delivery: every ``seq`` the agent's spool acknowledged is stored exactly once (CONTRACT section 5).

The end-to-end agent tests and the fault suite share it, so both count samples the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from collector.database import make_engine
from collector.tables import samples
from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.spool import Spool

# An agent that samples at 10 Hz and pushes at 5 Hz: a fault lands mid-push within seconds, not minutes.
FAST_AGENT_ENV = {"FLEETPILOT_SAMPLE_INTERVAL_SECONDS": "0.1", "FLEETPILOT_PUSH_INTERVAL_SECONDS": "0.2"}


@dataclass(frozen=True)
class Stored:
    """What the database holds for one node: row count and the lowest and highest ``seq`` (0 when empty)."""

    rows: int
    first_seq: int
    last_seq: int


def stored(database_url: str, node_id: str) -> Stored:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                select(func.count(), func.min(samples.c.seq), func.max(samples.c.seq)).where(
                    samples.c.node_id == node_id
                )
            ).one()
    finally:
        engine.dispose()
    return Stored(int(row[0]), int(row[1] or 0), int(row[2] or 0))


def stored_seqs(database_url: str, node_id: str) -> list[int]:
    """Every stored ``seq`` of the node, in order (repeats would show: the list is not a set)."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return list(conn.scalars(select(samples.c.seq).where(samples.c.node_id == node_id).order_by(samples.c.seq)))
    finally:
        engine.dispose()


@dataclass
class Fleet:
    """One server and the agents of its tests; each node has its spool and log under ``tmp``."""

    tmp: Path
    server: ServerProcess
    node_id: str = "node-e2e"
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, node_id: str) -> str:
        if node_id not in self.tokens:
            self.tokens[node_id] = self.server.create_agent_token(node_id)
        return self.tokens[node_id]

    def spool_dir(self, node_id: str | None = None) -> Path:
        return self.tmp / f"spool-{node_id or self.node_id}"

    def log_path(self, node_id: str | None = None) -> Path:
        return self.tmp / f"agent-{node_id or self.node_id}.log"

    def start_agent(
        self,
        node_id: str | None = None,
        *,
        collector: str | None = None,
        env: dict[str, str] | None = None,
        **options: Any,
    ) -> AgentProcess:
        """A fast agent for ``node_id`` (default the fleet's node), pushing to ``collector`` (default the server);
        ``options`` are further AgentProcess fields (``workload``, ``pools``, ``serve_port``)."""
        node = node_id or self.node_id
        return AgentProcess(
            collector=collector or self.server.url,
            token=self.token(node),
            node_id=node,
            spool_dir=self.spool_dir(node),
            gpu_probe="none",
            env={**FAST_AGENT_ENV, **(env or {})},
            log_path=self.log_path(node),
            **options,
        ).start()

    def stored(self, node_id: str | None = None) -> Stored:
        return stored(self.server.database_url, node_id or self.node_id)

    def wait_for_rows(self, at_least: int, timeout_s: float = 30.0, node_id: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.stored(node_id).rows >= at_least:
                return
            time.sleep(0.2)
        raise AssertionError(f"fewer than {at_least} rows after {timeout_s} s:\n{self.agent_log(node_id)}")

    def spooled_bytes(self, node_id: str | None = None) -> int:
        """The bytes of the node's spool segments on disk (readable while its agent runs, unlike the spool)."""
        return sum(
            path.stat().st_size for path in (self.spool_dir(node_id) / "samples").glob("seg-*.jsonl") if path.is_file()
        )

    def wait_for_spooling(self, node_id: str | None = None, timeout_s: float = 30.0) -> None:
        """Until the node's agent has written to its spool since the call: samples taken, none yet delivered."""
        before = self.spooled_bytes(node_id)
        deadline = time.monotonic() + timeout_s
        while self.spooled_bytes(node_id) <= before:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing spooled in {timeout_s} s:\n{self.agent_log(node_id)}")
            time.sleep(0.05)

    def agent_log(self, node_id: str | None = None) -> str:
        path = self.log_path(node_id)
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no agent log)"

    def spool(self, node_id: str | None = None) -> Spool:
        """The node's spool as a restarted agent would open it (only while that agent is stopped)."""
        return Spool(self.spool_dir(node_id) / "samples")

    def assert_every_sample_exactly_once(self, node_id: str | None = None, *, first_seq: int = 1) -> None:
        """Every seq from ``first_seq`` to the last one acknowledged is stored once: none lost, none twice."""
        spool = self.spool(node_id)
        assert spool.pending == 0, self.agent_log(node_id)
        got = self.stored(node_id)
        assert got.first_seq == first_seq
        assert got.last_seq == spool.acked_seq
        # the primary key (node_id, seq) forbids a seq twice; the count forbids gaps
        assert got.rows == got.last_seq - first_seq + 1


def stop_agent(agent: AgentProcess) -> None:
    """SIGTERM: the agent flushes what it can, then exits 0."""
    assert agent.stop(timeout_s=30) == 0, agent.log_tail()
