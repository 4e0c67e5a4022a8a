"""`fleetpilot demo` (what `make demo` runs): prints the two lines, its agents show up, Ctrl-C stops it cleanly."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def wait_for(what: str, probe: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(1.0)


def test_demo_runs_three_agents_and_shows_decisions_and_alerts_until_ctrl_c(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "fleetpilot", "demo"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url, token = read_announcement(demo)
        api = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10.0)

        def items(path: str) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = api.get(path).json()["items"]
            return found

        wait_for("three nodes up", lambda: [n["status"] for n in items("/nodes")] == ["up"] * 3, 60)
        assert [n["id"] for n in items("/nodes")] == ["demo-node-1", "demo-node-2", "demo-node-3"]
        assert (tmp_path / ".fleetpilot" / "fleetpilot.db").exists()
        assert [p["name"] for p in items("/pools")] == ["chat", "vision"]
        assert [t["name"] for t in items("/tenants")] == ["acme", "globex"]
        # within the first minutes (the demo's jobs run fast; this machine may be busy): decisions and an alert
        wait_for("scaling event", lambda: bool(items("/scaling-events")), 180)
        wait_for("firing alert", lambda: bool(items("/alerts?state=firing")), 180)
        assert api.get("/nodes/demo-node-1").json()["series"]  # live metrics
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(60)
    assert code == 0
