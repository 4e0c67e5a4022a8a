"""The API tokens' shapes: what a token is created with, and how it is answered (its secret once, at creation)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from web.tokens import MAX_NODE_SCOPE, NODE_GLOB_PATTERN, Role, TokenInfo
from wire.control import NAME_PATTERN


class TokenIn(BaseModel):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {"role": "viewer", "name": "grafana"},
                {"role": "agent", "name": "gpu-node-7", "node_id": "gpu-node-7"},
                {"role": "remote_write", "name": "team-a-prometheus", "node_scope": ["team-a-*"]},
            ]
        }
    }

    role: Role
    name: str = Field("", max_length=255)
    node_id: str | None = Field(None, pattern=NAME_PATTERN)
    node_scope: list[Annotated[str, Field(pattern=NODE_GLOB_PATTERN)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_NODE_SCOPE,
        description="remote_write only: the node-name globs it may write (fnmatch); unset: any node but an agent's",
    )


class TokenOut(BaseModel):
    id: str
    name: str
    role: Role
    node_id: str | None
    created_at: float
    node_scope: list[str] | None = None


class NewTokenOut(TokenOut):
    token: str


class TokenPage(BaseModel):
    items: list[TokenOut]
    next: str | None = None


def token_out(info: TokenInfo) -> TokenOut:
    scope = None if info.node_scope is None else list(info.node_scope)
    return TokenOut(
        id=info.id, name=info.name, role=info.role, node_id=info.node_id, created_at=info.created_at, node_scope=scope
    )
