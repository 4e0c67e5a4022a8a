"""fleetpilot.launch: children that always exec and die with their parent."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fleetpilot.launch import SETPRIV, ChildProcess, dying_with_parent

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


class _Exits(ChildProcess):
    """A child that exits 0 at once: start() then reports how it ended (its ready URL never answers)."""

    def command(self) -> list[str]:
        return ["true"]

    def ready_url(self) -> str:
        return "http://127.0.0.1:9/never"


@pytest.fixture
def grpc_in_use() -> Iterator[grpc.Server]:
    """A gRPC server and channel live in this process, as in a test run that has been through the KEDA tests: the
    state in which a forked child running Python before exec aborted in gRPC's atfork handler."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel("127.0.0.1:9")
    yield server
    channel.close()
    server.stop(None)


def test_children_exec_while_the_parent_uses_grpc(grpc_in_use: grpc.Server) -> None:
    """With preexec_fn, about 1 child in 40 died of SIGABRT before exec ("epoll_wait error: Bad file descriptor")."""
    codes = [
        subprocess.run(dying_with_parent(["true"]), check=False, capture_output=True).returncode for _ in range(300)
    ]
    assert codes.count(0) == len(codes), f"{len(codes) - codes.count(0)} of {len(codes)} children did not exec"


def test_start_runs_no_python_between_fork_and_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The way start() spawns is the way proven above: the command wrapped, no preexec_fn (which forces a fork)."""
    seen: dict[str, object] = {}
    real = subprocess.Popen

    def popen(command: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        seen.update(kwargs, command=command)
        return real(command, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="exited with 0"):
        _Exits(ready_timeout_s=10).start()
    assert seen.get("preexec_fn") is None
    assert seen["command"] == dying_with_parent(["true"])


@pytest.mark.skipif(SETPRIV is None, reason="setpriv (util-linux) is Linux-only")
def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; from fleetpilot.launch import dying_with_parent\n"
            "child = subprocess.Popen(dying_with_parent(['sleep', '120']))\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)",
        ],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the parent never started its child"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, f"child {child} outlived its SIGKILLed parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has died; init reaps it
