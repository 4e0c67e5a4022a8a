"""Corrupt files on disk: a clear error and a way out, never a crash loop.

- The agent's spool: a segment with a garbage line and an unreadable cursor. The agent says which file, moves it
  aside (``corrupt/``, where an operator can still read it), keeps sampling and pushing, and a later start does not
  meet it again. Only the samples inside the moved segment are missing, none is stored twice.
- The server's SQLite file: ``fleetpilot server`` exits 65 with one line naming the file and what to do, every time
  it is started on it; moved aside as the line says, the server starts.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetpilot.launch import FLEETPILOT, ServerProcess
from inference_agent.ports import free_port
from inference_agent.spool import CURSOR_FILE
from migrations import runner
from tests.support.fleet import Fleet, stop_agent, stored_seqs

pytestmark = pytest.mark.slow
PAGE_BYTES = 4096
EXIT_DATABASE_CORRUPT = 65


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ServerProcess(f"sqlite:///{tmp_path}/faults.db", log_path=tmp_path / "server.log") as server:
        yield Fleet(tmp_path, server)


def agent_gauge(metrics_url: str, name: str) -> float | None:
    for family in text_string_to_metric_families(httpx.get(f"{metrics_url}/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


def spool_seqs(path: Path) -> list[int]:
    """The seqs of a segment's readable lines."""
    seqs = []
    for line in path.read_bytes().splitlines():
        try:
            seqs.append(int(json.loads(line)["seq"]))
        except ValueError:
            continue  # the garbage line
    return seqs


def corrupt_spool(spool: Path) -> Path:
    """A garbage line in the middle of the newest segment and a cursor that is not JSON; the segment's path."""
    segment = sorted(spool.glob("seg-*.jsonl"))[-1]
    lines = segment.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 4, "the segment should hold the outage's samples"
    middle = len(lines) // 2
    segment.write_bytes(b"".join(lines[:middle]) + b"\x00\xffnot json at all\n" + b"".join(lines[middle:]))
    (spool / CURSOR_FILE).write_text('{"acked_seq": ')
    return segment


def test_a_corrupt_spool_is_moved_aside_and_the_agent_goes_on(fleet: Fleet) -> None:
    agent = fleet.start_agent()
    spool = fleet.spool_dir() / "samples"
    fleet.wait_for_rows(10)
    fleet.server.kill()  # samples pile up unacknowledged in the spool
    time.sleep(1.5)
    agent.kill()
    segment = corrupt_spool(spool)
    agent = fleet.start_agent()
    try:
        fleet.server.start()
        fleet.wait_for_rows(fleet.stored().rows + 20)
        assert agent_gauge(agent.metrics_url, "fleetpilot_agent_spool_corrupt_segments") == 1
        log = fleet.agent_log()
        assert f"spool segment {segment.name} is corrupt" in log and str(spool / "corrupt") in log
        assert "spool cursor" in log and "unreadable" in log
    finally:
        stop_agent(agent)
    aside = spool / "corrupt" / segment.name
    assert aside.exists() and (spool / "cursor.corrupt").exists()  # kept for an operator, not deleted
    seqs = stored_seqs(fleet.server.database_url, fleet.node_id)
    assert len(seqs) == len(set(seqs))
    missing = set(range(1, fleet.spool().acked_seq + 1)) - set(seqs)
    assert missing <= set(spool_seqs(aside)), "only samples of the moved segment may be missing"

    agent = fleet.start_agent()  # the next start does not meet the corruption again: no loop
    try:
        fleet.wait_for_rows(len(seqs) + 10)
        assert agent_gauge(agent.metrics_url, "fleetpilot_agent_spool_corrupt_segments") == 0
    finally:
        stop_agent(agent)


def run_server(database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [*FLEETPILOT, "server", "--port", str(free_port()), "--database-url", database_url]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_a_corrupt_sqlite_database_stops_the_server_with_one_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "fleetpilot.db"
    url = f"sqlite:///{path}"
    runner.upgrade(url)
    with path.open("r+b") as f:
        f.seek(PAGE_BYTES * 3)
        f.write(b"\xff\x00" * PAGE_BYTES)
    for _attempt in range(2):  # what a supervisor restarting it would see: the same answer, at once
        started = time.monotonic()
        result = run_server(url, tmp_path)
        assert result.returncode == EXIT_DATABASE_CORRUPT, result.stderr[-3000:]
        assert time.monotonic() - started < 30
        assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("fleetpilot:")]
        assert str(path) in line and "corrupt" in line and "move it aside" in line and "backup" in line
    path.rename(path.with_name("fleetpilot.db.corrupt"))  # the way out the message gives
    with ServerProcess(url, log_path=tmp_path / "server.log") as server:
        assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
