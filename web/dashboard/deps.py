"""The dashboard's dependencies, each declared once: who is signed in with which role, and the CSRF-checked form.

``signed_in(role)`` is the one role check of every page and form action: no session → a redirect to ``/login``; a
session whose token was revoked or changed role → the same; a role below ``role`` → 403. It keeps the session's token
on the request as the caller, so a form's change is audited with the dashboard user's token as its actor, exactly as
the same change made through the API with that token. ``CsrfForm`` is the one CSRF check of every form: the posted
``csrf_token`` must be the one bound to the session (or, on the login form, to the pre-login cookie).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from web.auth import ServicesDep
from web.dashboard.session import Session
from web.dashboard.state import DashboardState
from web.etags import parse_if_match
from web.services import AppServices
from web.tokens import ROLE_RANK, Role, TokenInfo

SESSION_COOKIE = "fp_session"
LOGIN_COOKIE = "fp_login"  # the pre-login nonce the login form's CSRF token is bound to


class LoginRequired(Exception):
    """No valid session: the caller is sent to ``/login`` (and back to ``next`` after)."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class RoleTooLow(Exception):
    def __init__(self, role: Role, needed: Role) -> None:
        super().__init__(f"a {role.value} may not do this; it needs the {needed.value} role")


class CsrfRefused(Exception):
    pass


class PageNotFound(LookupError):
    """What a page is about does not exist (an unknown node or pool): a 404 page naming it."""


def get_state(request: Request) -> DashboardState:
    state: DashboardState = request.app.state.dashboard
    return state


StateDep = Annotated[DashboardState, Depends(get_state)]


@dataclass(frozen=True)
class DashboardUser:
    session: Session
    csrf_token: str

    @property
    def role(self) -> Role:
        return self.session.role

    @property
    def name(self) -> str:
        return self.session.name

    def can(self, role: str) -> bool:
        """For templates too: ``user.can("operator")`` shows the operator's forms."""
        return ROLE_RANK.get(self.role, 0) >= ROLE_RANK.get(Role(role), len(ROLE_RANK) + 1)


def session_token(request: Request, state: DashboardState, services: AppServices) -> tuple[Session, TokenInfo] | None:
    """The request's session and its token, if the cookie is valid and the token still exists with the same role."""
    session = state.sessions.read(request.cookies.get(SESSION_COOKIE), now=services.clock())
    if session is None:
        return None
    token = services.tokens.get(session.token_id)
    return (session, token) if token is not None and token.role is session.role else None


def current_session(request: Request, state: DashboardState, services: AppServices) -> Session | None:
    found = session_token(request, state, services)
    return found[0] if found is not None else None


def signed_in(needed: Role) -> Callable[[Request, DashboardState, AppServices], DashboardUser]:
    """The role check; the session's token (re-read on this request) becomes the caller the audit log names."""

    def dependency(request: Request, state: StateDep, services: ServicesDep) -> DashboardUser:
        found = session_token(request, state, services)
        if found is None:
            raise LoginRequired(request.url.path)
        session, token = found
        user = DashboardUser(session, state.sessions.csrf_token(session.nonce))
        if not user.can(needed.value):
            raise RoleTooLow(session.role, needed)
        request.state.caller = token
        return user

    return dependency


Viewer = Annotated[DashboardUser, Depends(signed_in(Role.VIEWER))]
Operator = Annotated[DashboardUser, Depends(signed_in(Role.OPERATOR))]
Admin = Annotated[DashboardUser, Depends(signed_in(Role.ADMIN))]


async def csrf_form(request: Request, state: StateDep, services: ServicesDep) -> FormData:
    form = await request.form()
    session = await run_in_threadpool(state.sessions.read, request.cookies.get(SESSION_COOKIE), now=services.clock())
    nonce = session.nonce if session is not None else request.cookies.get(LOGIN_COOKIE)
    posted = form.get("csrf_token")
    if not state.sessions.csrf_valid(nonce, posted if isinstance(posted, str) else None):
        raise CsrfRefused("the form's CSRF token is missing or stale: reload the page and submit it again")
    return form


CsrfForm = Annotated[FormData, Depends(csrf_form)]


def field(form: FormData, name: str) -> str:
    """A text field of the form, stripped ('' when absent or a file)."""
    value: Any = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def posted_version(form: FormData) -> frozenset[int] | None:
    """The resource version the form was rendered at (its hidden ``version`` field), checked as the API checks an
    ``If-Match``: None when absent (any version will do); a value that is no version matches none."""
    return parse_if_match(field(form, "version") or None)


def validation_problem(exc: ValidationError) -> tuple[str, str]:
    """(field, message) of the first validation error: ``("rate_rps", "rate_rps: Input should be greater than 0")``."""
    problem = exc.errors()[0]
    at = ".".join(str(part) for part in problem["loc"]) or "form"
    return at, f"{at}: {problem['msg']}"
