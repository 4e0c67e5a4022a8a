"""The agent's token file is read again when it changes and after a 401 (projected ServiceAccount tokens rotate:
the kubelet swaps the file for a new token well before the old one expires)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.agent_token import AgentToken
from inference_agent.fake_collector import FakeCollector
from inference_agent.pusher import Pusher, PushOutcome
from inference_agent.rejected_batches import RejectedBatches
from inference_agent.spool import Spool
from inference_agent.telemetry import AgentTelemetry

OLD, NEW = "projected-token-one", "projected-token-two"  # the same length: a rewrite in place keeps the size


def swap(path: Path, token: str) -> None:
    """As the kubelet's atomic writer does: a new file put in place of the old."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(token)
    os.replace(fresh, path)


def pusher_with(tmp_path: Path, collector: FakeCollector, token: AgentToken) -> tuple[Pusher, Spool]:
    spool = Spool(tmp_path / "spool")
    client = httpx.Client(base_url="http://collector", transport=collector.transport)
    telemetry = AgentTelemetry(CollectorRegistry())
    pusher = Pusher(
        spool,
        client,
        telemetry,
        node_id="node-a",
        token=token,
        inventory=None,
        rejected=RejectedBatches(tmp_path, max_bytes=1 << 20, max_files=100),
    )
    return pusher, spool


def push_one(pusher: Pusher, spool: Spool, ts: float) -> PushOutcome:
    spool.append([{"ts": ts, "device": 0, "pool": None, "metrics": {"gpu_utilization_ratio": 0.4}, "extra": {}}])
    return pusher.push_once().outcome


def test_a_rewritten_token_file_is_sent_at_the_next_push(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(OLD + "\n")
    collector = FakeCollector(token=OLD)
    pusher, spool = pusher_with(tmp_path, collector, AgentToken(OLD, path))
    assert push_one(pusher, spool, 1000.0) is PushOutcome.PUSHED
    swap(path, NEW)
    collector.token = NEW  # the old one is refused from now on
    assert push_one(pusher, spool, 1001.0) is PushOutcome.PUSHED
    assert sorted(collector.accepted) == [1, 2]


def test_a_401_reads_the_file_again_when_its_change_did_not_show(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(OLD)
    before = path.stat()
    token = AgentToken(OLD, path)
    path.write_text(NEW)  # in place, same size, and the mtime set back: the stat sees no change
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    collector = FakeCollector(token=NEW)
    pusher, spool = pusher_with(tmp_path, collector, token)
    assert push_one(pusher, spool, 1000.0) is PushOutcome.FAILED  # sent OLD: 401
    assert pusher.push_once().outcome is PushOutcome.PUSHED  # re-read after the 401: NEW
    assert list(collector.accepted) == [1]


def test_an_unreadable_or_empty_file_mid_rotation_keeps_the_last_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text(OLD)
    token = AgentToken(OLD, path)
    path.write_text("")
    with caplog.at_level(logging.WARNING):
        assert token.current() == OLD
        path.unlink()
        assert token.current() == OLD
        assert token.current() == OLD  # logged once per change, not at every push
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"token file {path} is empty; keeping the token read before",
        f"token file {path}",
    ]
    swap(path, NEW)
    assert token.current() == NEW


def test_a_token_from_the_environment_is_sent_as_it_is() -> None:
    token = AgentToken(OLD)
    token.reread()
    assert token.current() == OLD
