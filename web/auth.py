"""Bearer-token authentication and role checks, as FastAPI dependencies declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from web.services import AppServices
from web.tokens import Role, TokenInfo


def get_services(request: Request) -> AppServices:
    services: AppServices = request.app.state.services
    return services


ServicesDep = Annotated[AppServices, Depends(get_services)]


def authenticate(services: AppServices, request: Request, needed: Role) -> TokenInfo:
    """The caller's token if it may act as ``needed``: 401 when missing or unknown, 403 when of another role."""
    header = request.headers.get("authorization", "")
    scheme, _, clear = header.partition(" ")
    if scheme.lower() != "bearer" or not clear.strip():
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    info = services.tokens.verify(clear.strip(), now=services.clock())
    if info is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown token", headers={"WWW-Authenticate": "Bearer"})
    if not info.can_act_as(needed):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"a {info.role.value} token may not do this; needs {needed}")
    return info


def require(needed: Role) -> Callable[[Request, AppServices], TokenInfo]:
    def dependency(request: Request, services: ServicesDep) -> TokenInfo:
        return authenticate(services, request, needed)

    return dependency


ViewerToken = Annotated[TokenInfo, Depends(require(Role.VIEWER))]
OperatorToken = Annotated[TokenInfo, Depends(require(Role.OPERATOR))]
AdminToken = Annotated[TokenInfo, Depends(require(Role.ADMIN))]
