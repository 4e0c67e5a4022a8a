"""The dashboard session: an HMAC-signed, expiring cookie carrying the signed-in token's id and role.

Why signed rather than stored: the server keeps no session table (no migration, nothing to clean up), and servers
sharing ``session_secret`` behind one load balancer all accept it. What a stateless cookie cannot do by itself —
end early — is covered two ways: it expires after ``session_lifetime_seconds``, and every request re-reads its token,
so revoking the token ends every session made with it. The clear token is never in the cookie.

The CSRF token of a form is HMAC(secret, "csrf:" + nonce), where the nonce is the session's (or, on the login form,
the pre-login cookie's): a synchronizer token that needs no storage and that another site cannot compute.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from web.tokens import Role, TokenInfo


@dataclass(frozen=True)
class Session:
    token_id: str
    name: str
    role: Role
    expires_at: float
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionCodec:
    """Issues and reads session cookies and the CSRF tokens bound to them; pure given ``now``."""

    def __init__(self, secret: bytes, *, lifetime_seconds: float) -> None:
        if len(secret) < 32:
            raise ValueError("session secret: at least 32 bytes")
        self._secret = secret
        self.lifetime_seconds = lifetime_seconds

    def _sign(self, purpose: str, data: bytes) -> bytes:
        return hmac.new(self._secret, purpose.encode() + b":" + data, hashlib.sha256).digest()

    def issue(self, token: TokenInfo, *, now: float) -> tuple[str, Session]:
        """A new session for ``token`` (with a fresh nonce, so a new login never reuses old CSRF tokens)."""
        session = Session(token.id, token.name, token.role, now + self.lifetime_seconds, secrets.token_urlsafe(16))
        body = json.dumps(
            {
                "t": session.token_id,
                "n": session.name,
                "r": session.role.value,
                "e": session.expires_at,
                "x": session.nonce,
            },
            separators=(",", ":"),
        ).encode()
        return f"{_b64(body)}.{_b64(self._sign('session', body))}", session

    def read(self, cookie: str | None, *, now: float) -> Session | None:
        """The session a cookie carries; None when absent, forged, malformed or expired."""
        if not cookie or cookie.count(".") != 1:
            return None
        body_text, signature_text = cookie.split(".")
        try:
            body, signature = _unb64(body_text), _unb64(signature_text)
            if not hmac.compare_digest(signature, self._sign("session", body)):
                return None
            fields = json.loads(body)
            session = Session(
                str(fields["t"]), str(fields["n"]), Role(fields["r"]), float(fields["e"]), str(fields["x"])
            )
        except (ValueError, KeyError, TypeError):
            return None
        return session if now < session.expires_at else None

    def csrf_token(self, nonce: str) -> str:
        return _b64(self._sign("csrf", nonce.encode()))

    def csrf_valid(self, nonce: str | None, token: str | None) -> bool:
        if not nonce or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(nonce))
