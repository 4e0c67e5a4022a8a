"""Issue 15, the server's web layer: each test makes the attack of one finding by requests, and failed before its fix.

7 bodies read before authentication · 8 sessions that outlive logout · 10 a limiter that locked out valid tokens and
believed any X-Forwarded-For · 15 secrets in output and example tokens that worked · 16 /metrics, /openapi.json and
/docs open with a scrape token set.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import Engine

from fleetpilot.cli import main
from fleetpilot.launch import ServerProcess
from fleetpilot.server import build_services
from fleetpilot.settings import ServerSettings
from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import csrf_of, push, sign_in
from web.app import create_app
from web.services import AppServices
from web.tokens import Role

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Streamed:
    """What an ASGI app answered to a streamed body, and how many of its bytes it pulled."""

    status: int
    body: bytes
    pulled: int


def post_streamed(
    app: FastAPI, path: str, *, total_bytes: int, headers: dict[str, str], declare_length: bool = False
) -> Streamed:
    """POST ``total_bytes`` to ``app`` in 1 MiB chunks made as they are pulled, counting what the app pulls (RSS
    would blur it: here a body that is never read costs nothing to send)."""
    sent = {"pulled": 0}
    chunks = (b"x" * MIB for _ in range(total_bytes // MIB))
    framing = {"content-length": str(total_bytes)} if declare_length else {"transfer-encoding": "chunked"}
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in {**headers, **framing}.items()]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw_headers,
        "client": ("192.0.2.10", 50000),
        "server": ("testserver", 80),
    }
    answer: dict[str, Any] = {"status": 0, "body": b""}

    async def receive() -> dict[str, Any]:
        chunk = next(chunks, None)
        sent["pulled"] += len(chunk or b"")
        return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    asyncio.run(app(scope, receive, send))
    return Streamed(answer["status"], answer["body"], sent["pulled"])


@pytest.fixture
def app(services: AppServices) -> FastAPI:
    return create_app(services)


# --- 7: bodies are read only after authentication, and never past api_max_body_bytes -----------------------------


@pytest.mark.parametrize("declare_length", [True, False])
def test_7_a_300_mb_body_without_a_token_is_refused_before_a_byte_is_read(app: FastAPI, declare_length: bool) -> None:
    answer = post_streamed(app, "/api/v1/pools", total_bytes=300 * MIB, headers={}, declare_length=declare_length)
    assert answer.status == 401 and b'"unauthorized"' in answer.body
    assert answer.pulled == 0  # before the fix: all 300 MiB, then the 401


def test_7_a_valid_token_s_body_is_capped_by_length_and_while_streaming(
    app: FastAPI, auth: Callable[..., dict[str, str]], services: AppServices
) -> None:
    cap = services.settings.api_max_body_bytes
    admin = auth("admin")
    declared = post_streamed(app, "/api/v1/pools", total_bytes=300 * MIB, headers=admin, declare_length=True)
    assert declared.status == 413 and b'"payload_too_large"' in declared.body and declared.pulled == 0
    chunked = post_streamed(app, "/api/v1/pools", total_bytes=300 * MIB, headers=admin)
    assert chunked.status == 413 and b'"payload_too_large"' in chunked.body
    assert chunked.pulled <= cap + MIB  # read up to the chunk that crossed the cap, not one more


def test_7_a_dashboard_form_post_is_capped_too(app: FastAPI, services: AppServices) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}
    answer = post_streamed(app, "/login", total_bytes=300 * MIB, headers=form)
    assert answer.status == 413 and answer.pulled <= services.settings.api_max_body_bytes + MIB


# --- 8: a session ends at logout, on every request and on every live stream ----------------------------------------


def test_8_the_cookie_from_before_logout_opens_nothing(app: FastAPI, token: Callable[..., str]) -> None:
    with TestClient(app) as browser, TestClient(app) as thief:
        sign_in(browser, token("admin"))
        copied = browser.cookies["fp_session"]
        assert browser.post("/logout", data={"csrf_token": csrf_of(browser.get("/").text)}).status_code == 200
        thief.cookies.set("fp_session", copied)
        assert thief.get("/settings", follow_redirects=False).status_code == 303  # before: 200 for 8 h


def test_8_the_session_cookie_is_secure_outside_development_even_behind_tls_termination(
    database_url: str, engine: Engine, token: Callable[..., str]
) -> None:
    settings = ServerSettings(environment="production", database_url=database_url, token_cache_seconds=0)
    with TestClient(create_app(build_services(settings, engine))) as browser:  # plain http, as behind an ingress
        form = browser.get("/login")
        nonce = form.cookies["fp_login"]  # a Secure cookie: the browser would send it over https; here by hand
        answer = browser.post(
            "/login",
            data={"token": token("viewer"), "csrf_token": csrf_of(form.text)},
            headers={"Cookie": f"fp_login={nonce}"},
            follow_redirects=False,
        )
    assert answer.status_code == 303
    for response, name in ((form, "fp_login"), (answer, "fp_session")):
        (cookie,) = [v for k, v in response.headers.multi_items() if k == "set-cookie" and v.startswith(f"{name}=")]
        assert "secure" in cookie.lower()  # before: only when uvicorn itself served https


def test_8_a_live_stream_ends_once_its_session_is_gone(
    app: FastAPI, services: AppServices, token: Callable[..., str], clock: FakeClock
) -> None:
    with TestClient(app) as browser, TestClient(app) as other_tab:
        push(services, browser, "node-a", clock)
        sign_in(browser, token("viewer"))
        other_tab.cookies.set("fp_session", browser.cookies["fp_session"])
        events = 0
        with browser.stream("GET", "/nodes/node-a/live?events=40") as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                events += 1
                if events == 1:
                    assert other_tab.post("/logout", data={"csrf_token": csrf_of(other_tab.get("/").text)})
                    clock.advance(5)  # the stream's next re-check of its session
        assert events <= 3  # before: all 40 events, 20 s after the logout


# --- 10: a valid credential is never throttled; X-Forwarded-For counts only from trusted proxies --------------------


def test_10_21_bad_guesses_do_not_lock_out_valid_tokens(
    client: TestClient, auth: Callable[..., dict[str, str]], services: AppServices, clock: FakeClock
) -> None:
    guess = {"Authorization": "Bearer fp_guess_0123456789abcdefghij"}
    answers = [client.get("/api/v1/pools", headers=guess).status_code for _ in range(21)]
    assert answers == [401] * 20 + [429]  # the guesser is slowed
    assert client.get("/api/v1/pools", headers=auth("admin")).status_code == 200  # before: 429 for 60 s
    push(services, client, "node-a", clock)  # and every agent's ingest still lands (push asserts its 200)


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("server")
    server = ServerProcess(
        f"sqlite:///{folder / 'fleetpilot.db'}", env={"FLEETPILOT_AUTH_MAX_FAILURES": "3"}, log_path=folder / "log"
    )
    with server:
        yield server


@pytest.mark.slow
def test_10_x_forwarded_for_from_an_untrusted_peer_does_not_evade_the_limit(real_server: ServerProcess) -> None:
    guess = {"Authorization": "Bearer fp_guess_0123456789abcdefghij"}
    answers = [
        httpx.get(f"{real_server.url}/api/v1/pools", headers={**guess, "X-Forwarded-For": f"203.0.113.{i}"}).status_code
        for i in range(4)
    ]
    assert answers == [401, 401, 401, 429]  # before: uvicorn believed loopback's header, four fresh "clients"


# --- 15: no secret in output, and the documentation's example secrets do not start a server ------------------------


@pytest.mark.slow
def test_15_an_admin_token_given_in_the_environment_is_never_printed(real_server: ServerProcess) -> None:
    assert httpx.get(f"{real_server.url}/readyz").status_code == 200
    log = real_server.log_path.read_text()
    assert "fleetpilot server on" in log and real_server.admin_token not in log


def example_secrets() -> list[str]:
    """Every admin token, session secret or scrape token the docs and deploy files show as an example value."""
    pattern = re.compile(r"(?:ADMIN_TOKEN|SESSION_SECRET|SCRAPE_TOKEN)[=:]\s*(\S+)|token:\s*(fp_admin\S+)")
    files = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "deploy").rglob("*")]
    found = {m[0] or m[1] for f in files if f.is_file() for m in pattern.findall(f.read_text(errors="replace"))}
    return sorted(value.strip("`'\"") for value in found if len(value.strip("`'\"")) > 3)


def test_15_the_documentation_s_example_tokens_are_refused() -> None:
    examples = example_secrets()
    assert "fp_admin_CHANGE-ME-to-at-least-32-random-characters" in examples
    for example in examples:  # before: the 44-character example passed the length check
        for name in ("admin_token", "session_secret", "scrape_token"):
            with pytest.raises(ValidationError, match=name):
                ServerSettings(**{name: example})  # type: ignore[arg-type]


def test_15_db_upgrade_prints_the_url_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    migrated: list[str] = []
    monkeypatch.setattr("migrations.runner.upgrade", migrated.append)  # no PostgreSQL here: the URL is the point
    url = "postgresql+psycopg://fleetpilot:s3cret-pw@db.internal:5432/fleetpilot"
    assert main(["db", "upgrade", "--database-url", url]) == 0
    printed = capsys.readouterr().out
    assert migrated == [url] and "s3cret-pw" not in printed and "fleetpilot:***@db.internal" in printed


# --- 16: with a scrape token set, /metrics, /openapi.json and /docs answer only who may read them ------------------

SCRAPE_TOKEN = "scrape-7f3a9c1e5b2d8f4a6c0e9b7d5f3a1c8e"


@pytest.fixture
def scraped_app(database_url: str, engine: Engine, clock: FakeClock) -> AppServices:
    settings = ServerSettings(database_url=database_url, token_cache_seconds=0, scrape_token=SCRAPE_TOKEN)
    services = build_services(settings, engine)
    services.clock = clock
    return services


@pytest.mark.parametrize("path", ["/metrics", "/openapi.json", "/docs"])
def test_16_with_a_scrape_token_the_scrape_and_the_api_description_are_closed(
    scraped_app: AppServices, path: str
) -> None:
    with TestClient(create_app(scraped_app)) as client:
        assert client.get(path).status_code == 401  # before: 200 to anyone
        assert client.get(path, headers={"Authorization": "Bearer scrape-wrong"}).status_code == 401
        assert client.get(path, headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"}).status_code == 200
        _info, viewer = scraped_app.tokens.create(Role.VIEWER, now=0.0)
        assert client.get(path, headers={"Authorization": f"Bearer {viewer}"}).status_code == 200


def test_16_a_dashboard_session_opens_the_api_description_but_not_the_scrape(scraped_app: AppServices) -> None:
    _info, viewer = scraped_app.tokens.create(Role.VIEWER, now=0.0)
    with TestClient(create_app(scraped_app)) as browser:
        sign_in(browser, viewer)
        assert browser.get("/openapi.json").status_code == 200 and browser.get("/docs").status_code == 200
        assert browser.get("/metrics").status_code == 401
