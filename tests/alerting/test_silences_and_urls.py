"""Silence matchers as Alertmanager has them, and webhook URLs: allowed schemes and hosts, never shown whole."""

from __future__ import annotations

import pytest

from alerting.receiver import LOOPBACK_NETWORKS
from alerting.silences import Matcher, MatchOp, Silence, silenced
from alerting.target_address import AddressPolicy
from alerting.webhooks import redact, validate_url

LABELS = {"alertname": "Hot", "severity": "critical", "node": "a", "pool": "chat"}


@pytest.mark.parametrize(
    ("matcher", "expected"),
    [
        (Matcher("alertname", "Hot"), True),
        (Matcher("alertname", "Cold"), False),
        (Matcher("pool", "chat", MatchOp.NOT_EQUAL), False),
        (Matcher("tenant", "x", MatchOp.NOT_EQUAL), True),  # a missing label reads as empty
        (Matcher("node", "a|b", MatchOp.REGEX), True),
        (Matcher("node", "a.", MatchOp.REGEX), False),  # the whole value must match
        (Matcher("severity", "info|warning", MatchOp.NOT_REGEX), True),
    ],
)
def test_matchers(matcher: Matcher, expected: bool) -> None:
    assert matcher.matches(LABELS) is expected


def test_a_silence_holds_between_its_start_and_end_and_needs_every_matcher() -> None:
    silence = Silence("s", (Matcher("alertname", "Hot"), Matcher("pool", "chat")), 100.0, 200.0, "op", "", 0.0)
    assert not silenced(LABELS, [silence], 99.0)
    assert silenced(LABELS, [silence], 100.0) and silenced(LABELS, [silence], 199.9)
    assert not silenced(LABELS, [silence], 200.0)
    assert not silenced({**LABELS, "pool": "embed"}, [silence], 150.0)


def test_bad_matchers_are_refused() -> None:
    with pytest.raises(ValueError, match="matchers"):
        Matcher("bad-name", "x")
    with pytest.raises(ValueError, match="matchers"):
        Matcher("node", "(", MatchOp.REGEX)


LOOPBACK = AddressPolicy.allowing(LOOPBACK_NETWORKS)


@pytest.mark.parametrize(
    ("url", "allowed", "addresses", "error"),
    [
        ("https://hooks.example.com/x", [], AddressPolicy(), None),  # no DNS here: checked again at each send
        ("http://127.0.0.1:9/hook", [], AddressPolicy(), "loopback"),
        ("http://127.0.0.1:9/hook", [], LOOPBACK, None),
        ("http://0177.0.0.1:18090/", [], LOOPBACK, "Invalid IPv4"),  # urlsplit takes it, httpx would not send it
        ("ftp://hooks.example.com/x", [], AddressPolicy(), "scheme"),
        ("file:///etc/passwd", [], AddressPolicy(), "scheme"),
        ("https:///nohost", [], AddressPolicy(), "no host"),
        ("https://hooks.example.com/x", ["*.example.com"], AddressPolicy(), None),
        ("https://example.com/x", ["*.example.com"], AddressPolicy(), "allow-list"),
        ("https://evil.com/x", ["hooks.example.com"], AddressPolicy(), "allow-list"),
        # the host the allow-list judges is the one httpx connects to, not the one urlsplit reads
        ("http://hooks.example.com\\@evil.com/", ["hooks.example.com"], AddressPolicy(), "allow-list"),
    ],
)
def test_webhook_urls(url: str, allowed: list[str], addresses: AddressPolicy, error: str | None) -> None:
    if error is None:
        assert validate_url(url, allowed, addresses) == url
    else:
        with pytest.raises(ValueError, match=f"^url: .*{error}"):
            validate_url(url, allowed, addresses)


def test_credentials_and_query_values_are_never_shown() -> None:
    shown = redact("https://user:hunter2@hooks.example.com:8443/path?token=abc&x=1")
    assert shown == "https://***@hooks.example.com:8443/path?token=***&x=***"
    assert "hunter2" not in shown and "abc" not in shown
    assert redact("http://127.0.0.1:9/hook") == "http://127.0.0.1:9/hook"
