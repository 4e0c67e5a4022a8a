"""Bearer-token authentication and role checks, as FastAPI dependencies declared once: every API route states its
role with ``ViewerToken``, ``OperatorToken``, ``AdminToken`` (or ``require(Role.AGENT)`` through ``authenticate``).

A valid token is always served: the token is checked first, and only a failure (no token, an unknown one) counts
against the caller's address (``web.client_address``). Past ``auth_max_failures`` within
``auth_failure_window_seconds`` that address's failures are answered 429 with ``Retry-After`` instead of 401, so a
guesser learns nothing more until its oldest failure leaves the window, while an agent or an admin behind the same
address keeps working (21 bad guesses from one ingress no longer lock out the fleet). Each failure is logged with
the address and path, never the token.

With ``kubernetes_agent_auth`` a JWT-shaped bearer token (fleetpilot's own never are) is a pod's projected
ServiceAccount token, checked by ``web.kube_tokens`` and answered as the agent token of the pod's node.
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
from web.errors import RETRY_AFTER_SECONDS, ApiError
from web.kube_tokens import KubeApiUnavailable, KubeTokenRefused, KubeTokenVerifier, looks_like_jwt
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


def _over_limit(request: Request, failures: FailedLogins, now: float) -> ApiError | None:
    """429 with Retry-After when the caller's address is over the failure limit; None when it may try."""
    address = client_address(request)
    wait_s = failures.retry_after_seconds(address, now=now)
    if wait_s <= 0:
        return None
    log.warning("authentication refused from %s on %s: over the failure limit", address, request.url.path)
    return ApiError(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"too many failed authentications from this address; retry in {math.ceil(wait_s)} s",
        headers={"Retry-After": str(math.ceil(wait_s))},
    )


def _refuse(request: Request, failures: FailedLogins, now: float, why: str) -> ApiError:
    """401 for a failed authentication, counted; 429 instead once the address is over the limit."""
    over = _over_limit(request, failures, now)
    if over is not None:
        return over
    address = client_address(request)
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
    if services.kube_tokens is not None and looks_like_jwt(clear):
        return _kubernetes_agent(services.kube_tokens, request, clear, now)
    info = services.tokens.verify(clear, now=now)
    if info is None:
        raise _refuse(request, _failures(request), now, "unknown token")
    return info


def _kubernetes_agent(verifier: KubeTokenVerifier, request: Request, clear: str, now: float) -> TokenInfo:
    """A pod's projected ServiceAccount token as its node's agent token: 401 (counted) when it is not valid, 403 when
    it is but may not act as an agent, 503 with Retry-After when the API server cannot say (the agent keeps its
    spool and retries). A token that needs a review is refused first from an address over the failure limit: 100
    junk tokens from one address cost 20 reviews (``auth_max_failures``), not 100."""
    if not verifier.is_cached(clear, now=now):
        over = _over_limit(request, _failures(request), now)
        if over is not None:
            raise over
    try:
        return verifier.verify(clear, now=now)
    except KubeTokenRefused as refused:
        if refused.status == status.HTTP_401_UNAUTHORIZED:
            raise _refuse(request, _failures(request), now, refused.reason) from None
        log.warning("Kubernetes token refused from %s on %s: %s", client_address(request), request.url.path, refused)
        raise ApiError(status.HTTP_403_FORBIDDEN, refused.reason) from None
    except KubeApiUnavailable as exc:
        log.error("cannot verify a Kubernetes token from %s: %s", client_address(request), exc)
        raise ApiError(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"the Kubernetes token cannot be verified now ({exc}); retry later",
            headers={"Retry-After": RETRY_AFTER_SECONDS},
        ) from None


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
    if clear is not None and _is_cached(services, clear, now=services.clock()):
        return authenticate(services, request, needed)
    return await run_in_threadpool(authenticate, services, request, needed)


def _is_cached(services: AppServices, clear: str, *, now: float) -> bool:
    """Whether :func:`identify` would answer ``clear`` without the database or the Kubernetes API server."""
    if services.kube_tokens is not None and looks_like_jwt(clear):
        return services.kube_tokens.is_cached(clear, now=now)
    return services.tokens.is_cached(clear, now=now)


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


def documented_machine_auth(role: Role = Role.AGENT) -> Any:
    """Ingest (and remote write) authenticates inside its handler, to count refusals; this names its role in the
    OpenAPI."""
    return Security(BEARER, scopes=[role.value])


ViewerToken = Annotated[TokenInfo, require(Role.VIEWER)]
OperatorToken = Annotated[TokenInfo, require(Role.OPERATOR)]
AdminToken = Annotated[TokenInfo, require(Role.ADMIN)]
