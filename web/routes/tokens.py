"""``/api/v1/tokens``: admins create, list and delete API tokens; a token's secret is shown once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field

from web.audit import Auditor, AuditorDep
from web.auth import AdminToken, ServicesDep
from web.errors import ERROR_RESPONSES, error_responses, not_found, refused
from web.tokens import MAX_NODE_SCOPE, NODE_GLOB_PATTERN, Role, TokenInfo, TokenStore
from wire.control import NAME_PATTERN

router = APIRouter(tags=["tokens"], responses=ERROR_RESPONSES)


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


def _out(info: TokenInfo) -> TokenOut:
    scope = None if info.node_scope is None else list(info.node_scope)
    return TokenOut(
        id=info.id, name=info.name, role=info.role, node_id=info.node_id, created_at=info.created_at, node_scope=scope
    )


@router.get("/tokens")
def list_tokens(services: ServicesDep, _token: AdminToken) -> TokenPage:
    return TokenPage(items=[_out(t) for t in services.tokens.list()])


def apply_token_create(audit: Auditor, body: TokenIn, *, now: float) -> tuple[TokenInfo, str]:
    """Create a token, audited as ("token", "create") without its secret: the API's POST and the dashboard's form.
    Answers the token and its clear text, which the caller shows once."""
    try:
        with audit.change("token", "create") as change:
            store = TokenStore(change.engine, cache_seconds=0)
            scope = None if body.node_scope is None else tuple(body.node_scope)
            info, clear = store.create(body.role, now=now, name=body.name, node_id=body.node_id, node_scope=scope)
            change.resource_id, change.after = info.id, _out(info)
    except ValueError as exc:
        raise refused(exc) from None
    return info, clear


@router.post("/tokens", status_code=status.HTTP_201_CREATED)
def create_token(body: TokenIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep) -> NewTokenOut:
    """The answer's ``token`` is the only time the secret is shown; the audit log keeps the token without it."""
    info, clear = apply_token_create(audit, body, now=services.clock())
    return NewTokenOut(**_out(info).model_dump(), token=clear)


def apply_token_delete(audit: Auditor, token_id: str, *, verifier: TokenStore) -> None:
    """Delete (revoke) a token, audited as ("token", "delete"): the API's DELETE and the dashboard's revoke button.
    ``verifier`` is the store that checks this process's requests: its cache forgets the token at once."""
    with audit.change("token", "delete", token_id) as change:
        store = TokenStore(change.engine, cache_seconds=0)
        before = store.get(token_id)
        if before is None or not store.delete(token_id):
            raise not_found(f"no token {token_id!r}")
        change.before = _out(before)
    verifier.forget_cached()  # every other process stops accepting it within REVOCATION_CHECK_SECONDS


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def delete_token(token_id: str, services: ServicesDep, _caller: AdminToken, audit: AuditorDep) -> Response:
    apply_token_delete(audit, token_id, verifier=services.tokens)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
