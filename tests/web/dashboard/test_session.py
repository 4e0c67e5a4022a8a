"""The session cookie and its CSRF tokens: signed, expiring, bound to one session."""

from __future__ import annotations

import pytest

from web.dashboard.session import SessionCodec
from web.tokens import Role, TokenInfo

SECRET = b"s" * 48
TOKEN = TokenInfo("abc123", "ops-alice", Role.OPERATOR, None, 0.0)


@pytest.fixture
def codec() -> SessionCodec:
    return SessionCodec(SECRET, lifetime_seconds=3600)


def test_a_cookie_reads_back_as_its_session_until_it_expires(codec: SessionCodec) -> None:
    cookie, session = codec.issue(TOKEN, now=1000.0)
    assert codec.read(cookie, now=1000.0) == session
    assert session.role is Role.OPERATOR and session.token_id == "abc123" and session.expires_at == 4600.0
    assert codec.read(cookie, now=4599.9) == session
    assert codec.read(cookie, now=4600.0) is None
    assert "fp_" not in cookie  # the clear token is never in it


@pytest.mark.parametrize(
    "mangle",
    [
        lambda c: c.replace(".", "x"),
        lambda c: c[:-2] + ("AA" if not c.endswith("AA") else "BB"),
        lambda c: "e30." + c.split(".")[1],  # another body ({}), the old signature
        lambda c: "",
        lambda c: "not.base64!",
    ],
)
def test_a_changed_or_malformed_cookie_is_no_session(codec: SessionCodec, mangle) -> None:  # type: ignore[no-untyped-def]
    cookie, _session = codec.issue(TOKEN, now=0.0)
    assert codec.read(mangle(cookie), now=1.0) is None


def test_a_cookie_of_another_secret_is_refused(codec: SessionCodec) -> None:
    cookie, _ = SessionCodec(b"t" * 48, lifetime_seconds=3600).issue(TOKEN, now=0.0)
    assert codec.read(cookie, now=1.0) is None


def test_csrf_tokens_are_bound_to_their_nonce(codec: SessionCodec) -> None:
    _cookie, one = codec.issue(TOKEN, now=0.0)
    _cookie, two = codec.issue(TOKEN, now=0.0)
    assert one.nonce != two.nonce  # a new login never reuses the old forms' tokens
    token = codec.csrf_token(one.nonce)
    assert codec.csrf_valid(one.nonce, token)
    assert not codec.csrf_valid(two.nonce, token)
    assert not codec.csrf_valid(one.nonce, None) and not codec.csrf_valid(None, token)
    assert not codec.csrf_valid(one.nonce, token[:-1])


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SessionCodec(b"short", lifetime_seconds=60)
