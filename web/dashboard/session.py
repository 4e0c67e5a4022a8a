"""The dashboard session: a random id in the cookie, its row in the database, checked on every request.

Why stored rather than signed: a signed cookie cannot be taken back — after logout the copied cookie still opened
``/settings`` for its whole 8 h. Here logout deletes the row, and since servers behind one load balancer share the
database, every server refuses the cookie at once. The row keeps the id's SHA-256 digest only (a read of the table
gives no usable cookie), the signed-in token's id and role (every request re-reads the token, so revoking it ends
its sessions), and expires after ``session_lifetime_seconds``; expired rows are swept at each login.

The CSRF token of a form is HMAC(secret, "csrf:" + nonce), where the nonce is the session's (or, on the login form,
the pre-login cookie's): a synchronizer token another site cannot compute.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Engine, delete, insert, select

from web.tables import dashboard_sessions
from web.tokens import Role, TokenInfo, digest

MAX_COOKIE_CHARS = 64  # token_urlsafe(32) is 43; anything longer is no session and costs no query


@dataclass(frozen=True)
class Session:
    token_id: str
    name: str
    role: Role
    expires_at: float
    nonce: str


class SessionStore:
    """Issues, reads and ends sessions, and makes the CSRF tokens bound to them; pure given ``now`` and the table."""

    def __init__(self, engine: Engine, secret: bytes, *, lifetime_seconds: float) -> None:
        if len(secret) < 32:
            raise ValueError("session secret: at least 32 bytes")
        self._engine = engine
        self._secret = secret
        self.lifetime_seconds = lifetime_seconds

    def issue(self, token: TokenInfo, *, now: float) -> tuple[str, Session]:
        """A new session for ``token`` (with a fresh nonce, so a new login never reuses old CSRF tokens)."""
        cookie = secrets.token_urlsafe(32)
        session = Session(token.id, token.name, token.role, now + self.lifetime_seconds, secrets.token_urlsafe(16))
        with self._engine.begin() as conn:
            conn.execute(delete(dashboard_sessions).where(dashboard_sessions.c.expires_at <= now))
            conn.execute(
                insert(dashboard_sessions).values(
                    id_hash=digest(cookie),
                    token_id=session.token_id,
                    name=session.name,
                    role=session.role.value,
                    nonce=session.nonce,
                    created_at=now,
                    expires_at=session.expires_at,
                )
            )
        return cookie, session

    def read(self, cookie: str | None, *, now: float) -> Session | None:
        """The session a cookie names; None when absent, unknown, ended or expired."""
        if not cookie or len(cookie) > MAX_COOKIE_CHARS:
            return None
        table = dashboard_sessions
        with self._engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.id_hash == digest(cookie), table.c.expires_at > now)).first()
        if row is None:
            return None
        m = row._mapping
        return Session(m["token_id"], m["name"], Role(m["role"]), m["expires_at"], m["nonce"])

    def end(self, cookie: str | None) -> None:
        """Logout: the cookie opens nothing from now on, on any server."""
        if cookie and len(cookie) <= MAX_COOKIE_CHARS:
            with self._engine.begin() as conn:
                conn.execute(delete(dashboard_sessions).where(dashboard_sessions.c.id_hash == digest(cookie)))

    def csrf_token(self, nonce: str) -> str:
        mac = hmac.new(self._secret, b"csrf:" + nonce.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def csrf_valid(self, nonce: str | None, token: str | None) -> bool:
        if not nonce or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(nonce))
