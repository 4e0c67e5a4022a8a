"""Login, sessions, redirects, roles, CSRF and security headers, in-process against the real stores."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.support.clock import FakeClock
from tests.web.dashboard.conftest import csrf_of
from web.services import AppServices
from web.tables import dashboard_sessions
from web.tokens import Role

PAGES = ["/", "/pools", "/tenants", "/alerts", "/health", "/settings"]


@pytest.mark.parametrize("path", [*PAGES, "/nodes/any", "/pools/any"])
def test_without_a_session_every_page_redirects_to_login(anonymous: TestClient, path: str) -> None:
    answer = anonymous.get(path, follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/login")


def test_login_answers_a_form_with_the_security_headers(anonymous: TestClient) -> None:
    answer = anonymous.get("/login")
    assert answer.status_code == 200 and 'name="token"' in answer.text
    csp = answer.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "same-origin"
    assert "<script>" not in answer.text  # no inline script anywhere


def test_a_valid_token_signs_in_with_an_httponly_strict_cookie(
    anonymous: TestClient, token: Callable[..., str]
) -> None:
    form = anonymous.get("/login?next=/pools")
    answer = anonymous.post(
        "/login",
        data={"token": token("viewer"), "csrf_token": csrf_of(form.text), "next": "/pools"},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/pools"
    cookie = answer.headers["set-cookie"].lower()
    assert "fp_session=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert anonymous.get("/").status_code == 200


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "javascript:alert(1)"])
def test_login_never_redirects_off_site(anonymous: TestClient, token: Callable[..., str], target: str) -> None:
    form = anonymous.get("/login")
    answer = anonymous.post(
        "/login",
        data={"token": token("viewer"), "csrf_token": csrf_of(form.text), "next": target},
        follow_redirects=False,
    )
    assert answer.headers["location"] == "/"


def test_a_bad_token_is_refused_and_logged_without_the_token(
    anonymous: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    form = anonymous.get("/login")
    with caplog.at_level(logging.WARNING):
        answer = anonymous.post("/login", data={"token": "fp_guess_secret123", "csrf_token": csrf_of(form.text)})
    assert answer.status_code == 401 and "not valid" in answer.text
    assert "login failed" in caplog.text and "fp_guess_secret123" not in caplog.text


def test_failed_logins_are_rate_limited_per_address(
    anonymous: TestClient, token: Callable[..., str], clock: FakeClock
) -> None:
    csrf = csrf_of(anonymous.get("/login").text)

    def guess() -> int:
        status: int = anonymous.post("/login", data={"token": "wrong", "csrf_token": csrf}).status_code
        return status

    assert [guess() for _ in range(6)] == [401] * 5 + [429]  # the guesser waits...
    held = anonymous.post("/login", data={"token": "wrong", "csrf_token": csrf})
    assert int(held.headers["retry-after"]) > 0
    clock.advance(61)  # ...until its failures leave the window
    assert [guess() for _ in range(6)] == [401] * 5 + [429]
    answer = anonymous.post("/login", data={"token": token("admin"), "csrf_token": csrf}, follow_redirects=False)
    assert answer.status_code == 303  # while a valid token is never held back


@pytest.mark.parametrize(("role", "node"), [("agent", "node-a"), ("remote_write", None)])
def test_a_machine_token_cannot_sign_in(
    anonymous: TestClient, token: Callable[..., str], services: AppServices, role: str, node: str | None
) -> None:
    csrf = csrf_of(anonymous.get("/login").text)
    answer = anonymous.post("/login", data={"token": token(role, node), "csrf_token": csrf}, follow_redirects=False)
    assert answer.status_code == 401, answer.text  # before: a remote_write token got 303 and a session (issue 35)
    assert f"{role} tokens cannot sign in" in answer.text and "viewer, operator or admin" in answer.text
    assert "fp_session" not in answer.cookies
    with services.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(dashboard_sessions)).scalar_one() == 0


def test_login_without_or_with_a_foreign_csrf_token_is_refused(
    anonymous: TestClient, token: Callable[..., str]
) -> None:
    anonymous.get("/login")
    assert anonymous.post("/login", data={"token": token("admin")}).status_code == 403
    assert anonymous.post("/login", data={"token": token("admin"), "csrf_token": "forged"}).status_code == 403


def test_the_session_ends_at_expiry_logout_or_revocation(
    browser: Callable[[str], TestClient], services: AppServices, clock: FakeClock
) -> None:
    client = browser("viewer")
    assert client.get("/").status_code == 200
    clock.advance(services.settings.session_lifetime_seconds + 1)
    assert client.get("/", follow_redirects=False).status_code == 303

    client = browser("viewer")
    csrf = csrf_of(client.get("/").text)
    assert client.post("/logout", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303
    assert client.get("/", follow_redirects=False).status_code == 303

    client = browser("admin")
    (session_token,) = [t for t in services.tokens.list() if t.role is Role.ADMIN]
    services.tokens.delete(session_token.id)
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_tampered_cookie_is_no_session(browser: Callable[[str], TestClient]) -> None:
    client = browser("viewer")
    cookie = client.cookies["fp_session"]
    client.cookies.set("fp_session", cookie[:-3] + "AAA")
    assert client.get("/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    ("role", "path", "data"),
    [
        ("viewer", "/pools/chat/scale", {"replicas": "2"}),
        ("viewer", "/pools/chat/mode", {"mode": "dry_run"}),
        ("viewer", "/tenants/acme/quotas", {"pool": "chat", "rate_rps": "5"}),
        ("viewer", "/silences", {"matchers": "alertname=X"}),
        ("operator", "/tenants", {"name": "new"}),
        ("operator", "/settings/tokens", {"role": "viewer"}),
        ("operator", "/settings/webhooks", {"url": "https://example.com/hook"}),
    ],
)
def test_form_actions_check_the_role(
    browser: Callable[[str], TestClient], role: str, path: str, data: dict[str, str]
) -> None:
    client = browser(role)
    csrf = csrf_of(client.get("/").text)
    answer = client.post(path, data={**data, "csrf_token": csrf}, follow_redirects=False)
    assert answer.status_code == 403 and "role" in answer.text
    assert answer.headers["x-frame-options"] == "DENY"


def test_a_form_without_its_csrf_token_is_refused(browser: Callable[[str], TestClient]) -> None:
    client = browser("admin")
    other = browser("admin")
    foreign = csrf_of(other.get("/").text)  # another session's token
    for data in ({}, {"csrf_token": "nope"}, {"csrf_token": foreign}):
        answer = client.post("/settings/tokens", data={"role": "viewer", **data}, follow_redirects=False)
        assert answer.status_code == 403 and "CSRF" in answer.text


@pytest.mark.parametrize("path", PAGES)
def test_every_page_carries_the_security_headers(browser: Callable[[str], TestClient], path: str) -> None:
    answer = browser("viewer").get(path)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert "<script>" not in answer.text


def test_assets_are_served_locally(browser: Callable[[str], TestClient]) -> None:
    client = browser("viewer")
    chart = client.get("/static/vendor/uPlot.iife.min.js")
    assert chart.status_code == 200 and chart.headers["content-type"].startswith("text/javascript")
    assert b"uPlot" in chart.content[:100]
    licence = client.get("/static/vendor/LICENSE-uPlot.txt")
    assert licence.status_code == 200 and "MIT License" in licence.text
    assert client.get("/static/app.css").status_code == 200
    assert client.get("/static/../deps.py").status_code == 404
    assert client.get("/static/nothing.js").status_code == 404
    assert client.get("/static/vendor/..%2Fapp.css").status_code == 404
