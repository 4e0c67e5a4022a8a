"""Headless Chromium (the Debian ``chromium`` package, driven by Playwright through ``executable_path``; no browser
download) against a real ``fleetpilot server`` with a real agent pushing to it."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetpilot.launch import AgentProcess, ServerProcess
from inference_agent.probes import replay

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"
RECORDING = Path(replay.__file__).resolve().parent / "fixtures" / "nvml_h100_recording.jsonl"


def chromium_path() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        found = candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must have it (.ci/run installs the chromium package)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium browser; skipped with the reason when Chromium or Playwright is missing (never under CI)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    path = chromium_path()
    if path is None:
        _unavailable("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def wait_for(condition: Callable[[], bool], page: Any, timeout_s: float = 15.0) -> None:
    """Poll ``condition`` from Python (the pages' CSP forbids the eval that ``page.wait_for_function`` needs)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the page did not update in time"
        page.wait_for_timeout(100)


@contextmanager
def signed_in(chromium: Any, base_url: str, token: str, *, allowed_errors: tuple[str, ...] = ()) -> Iterator[Any]:
    """A page signed in with ``token``, 1360 × 900; on leaving, no console error nor script error happened (a CSP
    violation, a failed script, a missing file) other than those containing one of ``allowed_errors``."""
    context = chromium.new_context(viewport={"width": 1360, "height": 900}, base_url=base_url)
    page = context.new_page()
    errors: list[str] = []

    def console(message: Any) -> None:
        if message.type == "error" and not any(allowed in message.text for allowed in allowed_errors):
            errors.append(f"{message.text} at {message.location.get('url')}")

    page.on("console", console)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto("/login")
    page.fill("#token", token)
    page.click("button:has-text('Sign in')")
    page.wait_for_url("**/")
    try:
        yield page
    finally:
        context.close()
    assert errors == [], errors


@contextmanager
def replaying_agent(server: ServerProcess, tmp: Path, node: str) -> Iterator[AgentProcess]:
    """A real agent pushing to ``server`` as ``node``, its GPU probe replaying a recorded two-GPU H100 at 500 ms;
    entered once the node has reported (a page is drawn with the nodes it finds), stopped on leaving."""
    agent = AgentProcess(
        collector=server.url,
        token=server.create_agent_token(node),
        node_id=node,
        spool_dir=tmp / "spool",
        gpu_probe=f"replay:{RECORDING}:2",
        log_path=tmp / "agent.log",
    ).start()
    try:
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        deadline = time.monotonic() + 60
        while not httpx.get(f"{server.url}/api/v1/nodes", headers=admin, timeout=10).json()["items"]:
            assert time.monotonic() < deadline, f"{node} never reported:\n{agent.log_tail()}"
            time.sleep(0.1)
        yield agent
    finally:
        agent.stop()
