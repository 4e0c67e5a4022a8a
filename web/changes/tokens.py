"""API token changes (admin): create a token, its secret answered once and never audited, and delete (revoke) one."""

from __future__ import annotations

from web.changes.audit import Auditor
from web.errors import not_found
from web.schemas.tokens import TokenIn, token_out
from web.tokens import TokenInfo, TokenStore


def apply_token_create(audit: Auditor, body: TokenIn, *, now: float) -> tuple[TokenInfo, str]:
    """Create a token, audited as ("token", "create") without its secret: the API's POST and the dashboard's form.
    Answers the token and its clear text, which the caller shows once."""
    with audit.change("token", "create") as change:
        store = TokenStore(change.engine, cache_seconds=0)
        scope = None if body.node_scope is None else tuple(body.node_scope)
        info, clear = store.create(body.role, now=now, name=body.name, node_id=body.node_id, node_scope=scope)
        change.resource_id, change.after = info.id, token_out(info)
    return info, clear


def apply_token_delete(audit: Auditor, token_id: str, *, verifier: TokenStore) -> None:
    """Delete (revoke) a token, audited as ("token", "delete"): the API's DELETE and the dashboard's revoke button.
    ``verifier`` is the store that checks this process's requests: its cache forgets the token at once."""
    with audit.change("token", "delete", token_id) as change:
        store = TokenStore(change.engine, cache_seconds=0)
        before = store.get(token_id)
        if before is None or not store.delete(token_id):
            raise not_found(f"no token {token_id!r}")
        change.before = token_out(before)
    verifier.forget_cached()  # every other process stops accepting it within REVOCATION_CHECK_SECONDS
