"""The session store and its CSRF tokens: stored, expiring, ended by logout, bound to one session."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from web.dashboard.session import SessionStore
from web.tables import dashboard_sessions
from web.tokens import Role, TokenInfo

SECRET = b"s" * 48
TOKEN = TokenInfo("abc123", "ops-alice", Role.OPERATOR, None, 0.0)


@pytest.fixture
def store(engine: Engine) -> SessionStore:
    return SessionStore(engine, SECRET, lifetime_seconds=3600)


def test_a_cookie_reads_back_as_its_session_until_it_expires(store: SessionStore) -> None:
    cookie, session = store.issue(TOKEN, now=1000.0)
    assert store.read(cookie, now=1000.0) == session
    assert session.role is Role.OPERATOR and session.token_id == "abc123" and session.expires_at == 4600.0
    assert store.read(cookie, now=4599.9) == session
    assert store.read(cookie, now=4600.0) is None
    assert "fp_" not in cookie  # the clear token is never in it


def test_an_ended_session_opens_nothing_and_another_stays(store: SessionStore) -> None:
    cookie, _ = store.issue(TOKEN, now=0.0)
    other, session = store.issue(TOKEN, now=0.0)
    store.end(cookie)
    assert store.read(cookie, now=1.0) is None
    assert store.read(other, now=1.0) == session


@pytest.mark.parametrize("mangle", [lambda c: c[:-2] + "AA", lambda c: "", lambda c: c * 3, lambda c: "not.a.cookie"])
def test_a_changed_or_malformed_cookie_is_no_session(store: SessionStore, mangle) -> None:  # type: ignore[no-untyped-def]
    cookie, _session = store.issue(TOKEN, now=0.0)
    assert store.read(mangle(cookie), now=1.0) is None


def test_the_table_holds_no_usable_cookie_and_logins_sweep_expired_rows(store: SessionStore, engine: Engine) -> None:
    old, _ = store.issue(TOKEN, now=0.0)
    cookie, _ = store.issue(TOKEN, now=3600.0)  # the first has expired: swept
    with engine.connect() as conn:
        stored = conn.execute(select(dashboard_sessions.c.id_hash)).scalars().all()
    assert len(stored) == 1 and cookie not in stored and old not in stored


def test_csrf_tokens_are_bound_to_their_nonce(store: SessionStore) -> None:
    _cookie, one = store.issue(TOKEN, now=0.0)
    _cookie, two = store.issue(TOKEN, now=0.0)
    assert one.nonce != two.nonce  # a new login never reuses the old forms' tokens
    token = store.csrf_token(one.nonce)
    assert store.csrf_valid(one.nonce, token)
    assert not store.csrf_valid(two.nonce, token)
    assert not store.csrf_valid(one.nonce, None) and not store.csrf_valid(None, token)
    assert not store.csrf_valid(one.nonce, token[:-1])


def test_a_short_secret_is_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SessionStore(engine, b"short", lifetime_seconds=60)
