"""``/api/v1/tokens``: admins create, list and delete API tokens; a token's secret is shown once."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from web.auth import AdminToken, ServicesDep
from web.changes.audit import AuditorDep
from web.changes.tokens import apply_token_create, apply_token_delete
from web.errors import ERROR_RESPONSES, error_responses
from web.schemas.tokens import NewTokenOut, TokenIn, TokenPage, token_out

router = APIRouter(tags=["tokens"], responses=ERROR_RESPONSES)


@router.get("/tokens")
def list_tokens(services: ServicesDep, _token: AdminToken) -> TokenPage:
    return TokenPage(items=[token_out(t) for t in services.tokens.list()])


@router.post("/tokens", status_code=status.HTTP_201_CREATED)
def create_token(body: TokenIn, services: ServicesDep, _token: AdminToken, audit: AuditorDep) -> NewTokenOut:
    """The answer's ``token`` is the only time the secret is shown; the audit log keeps the token without it."""
    info, clear = apply_token_create(audit, body, now=services.clock())
    return NewTokenOut(**token_out(info).model_dump(), token=clear)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404))
def delete_token(token_id: str, services: ServicesDep, _caller: AdminToken, audit: AuditorDep) -> Response:
    apply_token_delete(audit, token_id, verifier=services.tokens)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
