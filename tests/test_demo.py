"""`fleetpilot demo` (what `make demo` runs): prints the two lines, its agents show up, Ctrl-C stops it cleanly."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def read_announcement(demo: subprocess.Popen[str], timeout_s: float = 90.0) -> tuple[str, str]:
    assert demo.stdout is not None
    url = token = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (url is None or token is None):
        line = demo.stdout.readline()
        if not line:
            break
        if m := re.fullmatch(r"Dashboard: (http://127\.0\.0\.1:\d+)/\n", line):
            url = m.group(1)
        if m := re.fullmatch(r"Admin token: (\S+)\n", line):
            token = m.group(1)
    assert url is not None, "no 'Dashboard: http://127.0.0.1:PORT/' line"
    assert token is not None, "no 'Admin token: TOKEN' line"
    return url, token


def test_demo_runs_the_server_and_two_agents_until_ctrl_c(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "fleetpilot", "demo"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url, token = read_announcement(demo)
        headers = {"Authorization": f"Bearer {token}"}
        nodes: list[dict[str, object]] = []
        for _ in range(100):
            nodes = httpx.get(f"{url}/api/v1/nodes", headers=headers).json()["items"]
            if len(nodes) == 2 and all(n["status"] == "up" for n in nodes):
                break
            time.sleep(0.2)
        assert [(n["id"], n["status"]) for n in nodes] == [("demo-node-1", "up"), ("demo-node-2", "up")]
        assert (tmp_path / ".fleetpilot" / "fleetpilot.db").exists()
        pools = httpx.get(f"{url}/api/v1/pools", headers=headers).json()["items"]
        assert [p["name"] for p in pools] == ["chat", "vision"]
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(60)
    assert code == 0
