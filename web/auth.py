"""Bearer-token authentication and role checks, as FastAPI dependencies declared once: every API route states its
role with ``ViewerToken``, ``OperatorToken``, ``AdminToken`` (or ``require(Role.AGENT)`` through ``authenticate``).

A valid token is always served: the token is checked first, and only a failure (no token, an unknown one) counts
against the caller's address (``web.client_address``). Past ``auth_max_failures`` within
``auth_failure_window_seconds`` that address's failures are answered 429 with ``Retry-After`` instead of 401, so a
guesser learns nothing more until its oldest failure leaves the window, while an agent or an admin behind the same
address keeps working (21 bad guesses from one ingress no longer lock out the fleet). Each failure is logged with
the address and path, never the token.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from web.auth_limit import FailedLogins
from web.client_address import TrustedProxies, client_address
from web.errors import ApiError
from web.services import AppServices
from web.settings import WebSettings
from web.tokens import Role, TokenInfo

log = logging.getLogger(__name__)
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": "Bearer"}


def get_services(request: Request) -> AppServices:
    services: AppServices = request.app.state.services
    return services


ServicesDep = Annotated[AppServices, Depends(get_services)]


def install_auth_limit(app: FastAPI, settings: WebSettings) -> None:
    """The per-process counter of failed authentications (one per app, so each test's app starts clean) and the
    proxies whose ``X-Forwarded-For`` names the client it counts."""
    app.state.auth_failures = FailedLogins(
        max_failures=settings.auth_max_failures, window_seconds=settings.auth_failure_window_seconds
    )
    app.state.trusted_proxies = TrustedProxies.parse(settings.trusted_proxies)


def _failures(request: Request) -> FailedLogins:
    found = getattr(request.app.state, "auth_failures", None)
    if found is None:  # an app built without install_auth_limit: the settings' defaults
        found = request.app.state.auth_failures = FailedLogins()
    return found


def _refuse(request: Request, failures: FailedLogins, now: float, why: str) -> ApiError:
    """401 for a failed authentication, counted; 429 instead once the address is over the limit."""
    address = client_address(request)
    wait_s = failures.retry_after_seconds(address, now=now)
    if wait_s > 0:
        log.warning("authentication refused from %s on %s: over the failure limit", address, request.url.path)
        return ApiError(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"too many failed authentications from this address; retry in {math.ceil(wait_s)} s",
            headers={"Retry-After": str(math.ceil(wait_s))},
        )
    failures.record_failure(address, now=now)
    log.warning("authentication failed from %s on %s %s: %s", address, request.method, request.url.path, why)
    return ApiError(status.HTTP_401_UNAUTHORIZED, why, headers=UNAUTHORIZED_HEADERS)


def bearer_token(request: Request) -> str | None:
    """The clear token of ``Authorization: Bearer <token>``, None when there is none."""
    scheme, _, clear = request.headers.get("authorization", "").partition(" ")
    return clear.strip() if scheme.lower() == "bearer" and clear.strip() else None


def identify(services: AppServices, request: Request) -> TokenInfo:
    """The caller's token, whatever its role: 401 when it is missing or unknown (429 from an address over the
    failure limit). Runs in a worker thread (the token lookup reads the database)."""
    now = services.clock()
    clear = bearer_token(request)
    if clear is None:
        raise _refuse(request, _failures(request), now, "missing bearer token (Authorization: Bearer <token>)")
    info = services.tokens.verify(clear, now=now)
    if info is None:
        raise _refuse(request, _failures(request), now, "unknown token")
    return info


def authenticate(services: AppServices, request: Request, needed: Role) -> TokenInfo:
    """The caller's token if it may act as ``needed`` (see :func:`identify`); 403 when it is of another role. The
    accepted token is kept on the request for the audit log."""
    info = identify(services, request)
    if not info.can_act_as(needed):
        raise ApiError(status.HTTP_403_FORBIDDEN, f"a {info.role.value} token may not do this; needs {needed}")
    request.state.caller = info
    return info


async def authenticate_on_loop(services: AppServices, request: Request, needed: Role) -> TokenInfo:
    """:func:`authenticate` for a route on the event loop: a cached token is checked right there, one that needs the
    database in a worker thread. Ingest authenticates first of all, and a lookup on the loop stalled every request
    of the process behind it — with 5 s pushes and a 5 s cache, nearly every push is a miss (bench.soak)."""
    clear = bearer_token(request)
    if clear is not None and services.tokens.is_cached(clear, now=services.clock()):
        return authenticate(services, request, needed)
    return await run_in_threadpool(authenticate, services, request, needed)


# Declared by every role check, so the OpenAPI names the scheme (and Swagger UI offers "Authorize"); the check itself
# reads the header in ``authenticate``, which ingest calls directly.
BEARER = HTTPBearer(
    scheme_name="bearer",
    auto_error=False,
    description="an API token (`fleetpilot token create`); each operation's security requirement names its role",
)
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


@dataclass(frozen=True)
class Require:
    """The one role check of the API: a dependency accepting tokens that may act as ``needed``."""

    needed: Role

    def __call__(self, request: Request, services: ServicesDep, _bearer: BearerDep) -> TokenInfo:
        return authenticate(services, request, self.needed)


def require(needed: Role) -> Any:
    """``Annotated[TokenInfo, require(Role.OPERATOR)]``: the role check, named as the role in the OpenAPI's security
    requirement of the operation (OpenAPI 3.1 allows role names there for an HTTP scheme)."""
    return Security(Require(needed), scopes=[needed.value])


def documented_agent_auth() -> Any:
    """Ingest authenticates inside its handler (to count refusals); this names its role in the OpenAPI."""
    return Security(BEARER, scopes=[Role.AGENT.value])


ViewerToken = Annotated[TokenInfo, require(Role.VIEWER)]
OperatorToken = Annotated[TokenInfo, require(Role.OPERATOR)]
AdminToken = Annotated[TokenInfo, require(Role.ADMIN)]
