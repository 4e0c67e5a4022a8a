"""Issue 35 #10, the dashboard's live streams in-process: ``since`` is clamped to the live chart's window, and the
open streams are capped per session and per process (429 naming the cap), a closed one giving its slot back."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from itertools import product
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, insert

from collector.database import make_engine
from collector.tables import NO_DEVICE, NO_POOL, samples
from fleetpilot.launch import ServerProcess
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from tests.conftest import gpu_sample
from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import csrf_of, push, sign_in
from web.app import create_app
from web.dashboard.charts import RAW_SECONDS
from web.services import AppServices
from web.tokens import Role

MIB = 1 << 20


def events_of(client: TestClient, url: str) -> list[dict[str, Any]]:
    with client.stream("GET", url) as stream:
        assert stream.status_code == 200, stream.read()
        return [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]


def test_since_0_sends_only_the_live_window_not_the_whole_history(
    browser: Callable[[str], TestClient], services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    seq = push(services, client, "node-a", clock, gpus=2)  # an hour before the page
    clock.advance(3600)
    push(services, client, "node-a", clock, seq=seq, gpus=2)
    (event,) = events_of(client, "/nodes/node-a/live?since=0&events=1")
    drawn = [t["origin"] + x / 1000 for tables in event["charts"].values() for t in tables for x in t["x"]]
    assert drawn and min(drawn) >= clock() - RAW_SECONDS  # before: the hour-old samples too (and all history)


@pytest.fixture
def capped(database_url: str, engine: Engine, clock: FakeClock) -> AppServices:
    settings = ServerSettings(
        database_url=database_url,
        token_cache_seconds=0,
        dashboard_live_streams_per_session=2,
        dashboard_live_streams_per_process=3,
    )
    services = build_services(settings, engine)
    services.clock = clock
    return services


@pytest.fixture
def sessions(capped: AppServices, clock: FakeClock) -> Iterator[Callable[[], TestClient]]:
    """``open_session()``: a new browser with a viewer session on the capped app (all on one app: one process)."""
    app = create_app(capped)
    opened: list[TestClient] = []

    def open_session() -> TestClient:
        client = TestClient(app, raise_server_exceptions=False)
        opened.append(client)
        return sign_in(client, capped.tokens.create(Role.VIEWER, now=clock())[1])

    yield open_session
    for client in opened:
        client.close()


def test_streams_past_the_session_cap_are_refused_429_naming_it_and_a_closed_one_frees_its_slot(
    sessions: Callable[[], TestClient], capped: AppServices, clock: FakeClock
) -> None:
    viewer = sessions()
    push(capped, viewer, "node-a", clock)
    with ExitStack() as held:
        for _ in range(2):
            assert held.enter_context(viewer.stream("GET", "/nodes/node-a/live")).status_code == 200
        third = viewer.get("/fleet/live")
        assert third.status_code == 429  # before: a 61st, 62nd, ... stream, each reading its own history
        assert "dashboard_live_streams_per_session" in third.text and "2" in third.text
        assert third.headers["Retry-After"]
    assert events_of(viewer, "/nodes/node-a/live?events=1")  # both closed: their slots are free again


def test_streams_past_the_process_cap_are_refused_429_naming_it(
    sessions: Callable[[], TestClient], capped: AppServices, clock: FakeClock
) -> None:
    first, second = sessions(), sessions()
    push(capped, first, "node-a", clock)
    with ExitStack() as held:
        for client in (first, first, second):
            assert held.enter_context(client.stream("GET", "/nodes/node-a/live")).status_code == 200
        fourth = second.get("/nodes/node-a/live")
        assert fourth.status_code == 429
        assert "dashboard_live_streams_per_process" in fourth.text and "3" in fourth.text


# --- a real server: 60 streams of one viewer session, asking for all history --------------------------------------

STREAMS = 60
HELD_SECONDS = 8.0
SKIPPED_RUN = re.compile(r"skipped: maximum number of running instances|was missed by")


def _history(url: str, node_id: str, now: float) -> None:
    """Three hours of a node's samples (8 GPUs and the host, every 0.5 s), all older than the live window: what
    ``since=0`` would read, 88,000 rows an event."""
    steps = product(range(21_600), (NO_DEVICE, *range(8)))
    rows = [
        {"node_id": node_id, "seq": 1_000_000 + i, "ts": now - 1200 - step / 2, "device": device, "pool": NO_POOL}
        | {"gpu_utilization_ratio": 0.5, "gpu_temperature_celsius": 60.0}
        for i, (step, device) in enumerate(steps)
    ]
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(samples), rows)
    engine.dispose()


def _sign_in(server: ServerProcess, token: str) -> str:
    """The session cookie of a viewer signed in through the login form."""
    with httpx.Client(base_url=server.url) as browser:
        form = browser.get("/login")
        answer = browser.post("/login", data={"token": token, "csrf_token": csrf_of(form.text)})
        assert answer.status_code in (200, 303), answer.text
        return browser.cookies["fp_session"]


def _hold(server: ServerProcess, cookie: str, stop: threading.Event) -> tuple[int, str]:
    """One live stream of the node page, read until ``stop``: its status and what a refusal said."""
    browser = httpx.Client(base_url=server.url, cookies={"fp_session": cookie}, timeout=60.0)
    with browser, browser.stream("GET", "/nodes/node-a/live?since=0") as stream:
        if stream.status_code != 200:
            return stream.status_code, stream.read().decode()
        for _line in stream.iter_lines():
            if stop.is_set():
                break
        return 200, ""


@pytest.mark.slow
def test_60_streams_of_one_session_neither_starve_the_jobs_nor_the_api_nor_grow_the_server(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleetpilot.db'}"
    with ServerProcess(url, log_path=tmp_path / "server.log") as server:
        agent = {"Authorization": f"Bearer {server.create_agent_token('node-a')}"}
        now = time.time()
        batch = {"node_id": "node-a", "samples": [gpu_sample(1, now)]}
        assert httpx.post(f"{server.url}/api/v1/ingest", json=batch, headers=agent).status_code == 200
        _history(url, "node-a", now)
        cookie = _sign_in(server, server.create_token("viewer"))
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        assert server.process is not None
        rss_before, logged_before = _rss_bytes(server.process.pid), len(server.log_path.read_text())
        stop = threading.Event()
        with ThreadPoolExecutor(max_workers=STREAMS) as pool:
            held = [pool.submit(_hold, server, cookie, stop) for _ in range(STREAMS)]
            deadline = time.monotonic() + HELD_SECONDS
            while time.monotonic() < deadline:  # the API answers while the streams run (before: 30 s, then 500)
                assert httpx.get(f"{server.url}/api/v1/pools", headers=admin, timeout=20.0).status_code == 200
                time.sleep(1.0)
            rss_during = _rss_bytes(server.process.pid)
            stop.set()
            answers = [f.result() for f in held]
        log = server.log_path.read_text()[logged_before:]  # the streams' time (the history's insert held the writer)
    assert sorted(code for code, _ in answers).count(200) == 8  # the default dashboard_live_streams_per_session
    refusals = [text for code, text in answers if code == 429]
    assert len(refusals) == STREAMS - 8 and "dashboard_live_streams_per_session = 8" in refusals[0]
    assert SKIPPED_RUN.findall(log) == []  # before: the jobs skipped their runs, waiting for a connection
    assert rss_during - rss_before < 200 * MIB  # before: ~100 MB a stream reading 88,000 rows at once


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")
