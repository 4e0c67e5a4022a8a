"""``GET/POST /login`` and ``POST /logout``: an API token in, a session cookie out.

The login form's CSRF token is bound to a pre-login cookie, so another site cannot log a browser in under its own
token. A valid token of a human role (viewer, operator, admin: ``ROLE_RANK``) signs in; the machine roles (agent,
remote_write) send data, nothing else, and are refused as an unknown token is. Failed logins are counted per client
address (``web.client_address``), answered 429 instead of 401 past the limit, and logged with the address, never the
token. Logout deletes the session, so the cookie opens nothing afterwards, on any server. Both cookies are
``Secure`` per ``cookie_secure`` (unset: everywhere but in development), not per the scheme this process sees —
behind a TLS-terminating ingress that is plain http.
"""

from __future__ import annotations

import logging
import secrets
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from web.auth import ServicesDep
from web.client_address import client_address
from web.dashboard.deps import LOGIN_COOKIE, SESSION_COOKIE, CsrfForm, StateDep, current_session, field
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.tokens import ROLE_RANK, Role

router = APIRouter(route_class=DashboardRoute)
log = logging.getLogger(__name__)


def _safe_next(target: str) -> str:
    """Only a path on this site (``/pools/x``), never ``//evil.example`` or a full URL."""
    parts = urlsplit(target)
    if not target.startswith("/") or target.startswith("//") or parts.scheme or parts.netloc:
        return "/"
    return target


def _login_page(
    request: Request, state: StateDep, services: ServicesDep, *, error: str = "", status_code: int = 200
) -> Response:
    nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(16)
    response = page(
        request,
        "login.html",
        None,
        status_code=status_code,
        login_csrf=state.sessions.csrf_token(nonce),
        next_path=_safe_next(request.query_params.get("next", "/")),
        error=error,
    )
    secure = services.settings.secure_cookies
    response.set_cookie(
        LOGIN_COOKIE, nonce, httponly=True, samesite="strict", secure=secure, path="/login", max_age=3600
    )
    return response


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, state: StateDep, services: ServicesDep) -> Response:
    if current_session(request, state, services) is not None:
        return RedirectResponse(_safe_next(request.query_params.get("next", "/")), status_code=303)
    return _login_page(request, state, services)


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, form: CsrfForm, state: StateDep, services: ServicesDep) -> Response:
    now, address = services.clock(), client_address(request)
    token = services.tokens.verify(field(form, "token"), now=now)
    if token is None or token.role not in ROLE_RANK:
        return _refused(request, state, services, address, machine=None if token is None else token.role)
    cookie, _session = state.sessions.issue(token, now=now)
    log.info("dashboard login: token %s (%s) from %s", token.id, token.role.value, address)
    response = RedirectResponse(_safe_next(field(form, "next") or "/"), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=int(state.sessions.lifetime_seconds),
        httponly=True,
        samesite="strict",
        secure=services.settings.secure_cookies,
        path="/",
    )
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


def _refused(
    request: Request, state: StateDep, services: ServicesDep, address: str, *, machine: Role | None
) -> Response:
    """401 for a failed login (an unknown token, or a valid ``machine`` token), counted; 429 instead once the
    address is over the limit."""
    now = services.clock()
    wait = state.failed_logins.retry_after_seconds(address, now=now)
    if wait > 0:
        log.warning("dashboard login refused for %s: too many failures, retry in %.0f s", address, wait)
        error = f"Too many failed logins: try again in {wait:.0f} s."
        response = _login_page(request, state, services, error=error, status_code=429)
        response.headers["Retry-After"] = str(max(1, round(wait)))
        return response
    state.failed_logins.record_failure(address, now=now)
    log.warning("dashboard login failed from %s: %s", address, f"a {machine} token" if machine else "unknown token")
    error = (
        f"{machine} tokens cannot sign in to the dashboard: only viewer, operator or admin tokens can."
        if machine
        else "That token is not valid."
    )
    return _login_page(request, state, services, error=error, status_code=401)


@router.post("/logout")
def logout(request: Request, _form: CsrfForm, state: StateDep, services: ServicesDep) -> Response:
    state.sessions.end(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/login", status_code=303)
    secure = services.settings.secure_cookies
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=secure)
    return response
