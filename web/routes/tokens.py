"""``/api/v1/tokens``: admins create, list and delete API tokens; a token's secret is shown once."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status
from pydantic import BaseModel, Field

from collector.wire import NAME_PATTERN
from web.auth import AdminToken, ServicesDep
from web.tokens import Role, TokenInfo

router = APIRouter(tags=["tokens"])


class TokenIn(BaseModel):
    role: Role
    name: str = Field("", max_length=255)
    node_id: str | None = Field(None, pattern=NAME_PATTERN)


class TokenOut(BaseModel):
    id: str
    name: str
    role: Role
    node_id: str | None
    created_at: float


class NewTokenOut(TokenOut):
    token: str


class TokenPage(BaseModel):
    items: list[TokenOut]
    next: str | None = None


def _out(info: TokenInfo) -> TokenOut:
    return TokenOut(id=info.id, name=info.name, role=info.role, node_id=info.node_id, created_at=info.created_at)


@router.get("/tokens")
def list_tokens(services: ServicesDep, _token: AdminToken) -> TokenPage:
    return TokenPage(items=[_out(t) for t in services.tokens.list()])


@router.post("/tokens", status_code=status.HTTP_201_CREATED, responses={422: {}})
def create_token(body: TokenIn, services: ServicesDep, _token: AdminToken) -> NewTokenOut:
    try:
        info, clear = services.tokens.create(body.role, now=services.clock(), name=body.name, node_id=body.node_id)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    return NewTokenOut(**_out(info).model_dump(), token=clear)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {}})
def delete_token(token_id: str, services: ServicesDep, caller: AdminToken) -> Response:
    if not services.tokens.delete(token_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
