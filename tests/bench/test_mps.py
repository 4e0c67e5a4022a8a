"""``bench.mps``: its private MPS daemon against the in-repo stand-in for ``nvidia-cuda-mps-control`` (started with
its own pipe and log directories, seen by the agent's detection, quit and removed after), what it says when the
daemon cannot start, and the skipped answer without CUDA (the GPU run is the device's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.lib.mps_daemon import MpsUnavailable, private_mps_daemon
from inference_agent.serving.supervision.quota import mps_daemon_running

FAKE = str(Path(__file__).resolve().parents[2] / "scripts" / "fake-nvidia-cuda-mps-control")


def test_the_private_daemon_has_its_own_pipe_the_agent_detects_and_is_quit_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "commands.log"
    monkeypatch.setenv("FAKE_MPS_LOG", str(log))
    with private_mps_daemon(FAKE) as daemon:
        base = daemon.base
        assert str(base).startswith("/tmp/mps-")  # short: the pipe directory holds Unix sockets
        assert mps_daemon_running(daemon.env, os.path.exists)
        assert not mps_daemon_running({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}, os.path.exists)
        daemon.command("start_server -uid 0")
        assert daemon.command("get_server_list") == "40001"
    assert log.read_text().splitlines() == ["-d", "start_server -uid 0", "get_server_list", "quit"]
    assert not base.exists()
    assert "Control daemon started" in daemon.final_logs


def test_a_daemon_that_does_not_start_is_reported_with_what_it_said(tmp_path: Path) -> None:
    broken = tmp_path / "nvidia-cuda-mps-control"
    broken.write_text("#!/bin/sh\necho 'An instance of this daemon is already running' >&2\nexit 1\n")
    broken.chmod(0o755)
    said = r"-d exited 1 and said 'An instance of this daemon is already running'"
    with pytest.raises(MpsUnavailable, match=said), private_mps_daemon(str(broken)):
        pass


def test_without_the_binary_it_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MpsUnavailable, match="no nvidia-cuda-mps-control on PATH"), private_mps_daemon():
        pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the bench runs for real (scripts/gpu-check.sh)")
def test_without_cuda_it_says_why_it_skipped_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.mps", "--quick"], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"bench": "mps", "skipped": "torch sees no CUDA device"}
