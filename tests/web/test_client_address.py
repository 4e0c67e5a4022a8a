"""The client address: the connection's own unless it is a trusted proxy, then the right-most untrusted hop."""

from __future__ import annotations

import pytest

from web.client_address import UNKNOWN, TrustedProxies

PROXIES = TrustedProxies.parse(["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"])


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("203.0.113.9", ["6.6.6.6"], "203.0.113.9"),  # an untrusted peer's header is ignored
        ("127.0.0.1", ["6.6.6.6"], "127.0.0.1"),  # loopback is not trusted unless configured
        ("10.0.0.5", ["203.0.113.9"], "203.0.113.9"),
        ("10.0.0.5", ["6.6.6.6, 203.0.113.9, 10.1.2.3"], "203.0.113.9"),  # what the client wrote is left of it
        ("10.0.0.5", ["6.6.6.6", "203.0.113.9"], "203.0.113.9"),  # several headers read as one list
        ("192.0.2.7", ["2001:db8::1, 198.51.100.4"], "198.51.100.4"),
        ("10.0.0.5", ["10.0.0.9, 10.0.0.8"], "10.0.0.9"),  # every hop a proxy: the first is the origin
        ("10.0.0.5", [], "10.0.0.5"),
        ("10.0.0.5", ["not-an-address"], "not-an-address"),
        (None, ["6.6.6.6"], UNKNOWN),
    ],
)
def test_the_client_is_the_right_most_untrusted_address(
    peer: str | None, forwarded_for: list[str], client: str
) -> None:
    assert PROXIES.client_of(peer, forwarded_for) == client


def test_without_trusted_proxies_the_header_is_never_read() -> None:
    assert TrustedProxies().client_of("127.0.0.1", ["6.6.6.6"]) == "127.0.0.1"


def test_a_long_forged_hop_is_cut_to_bound_the_limiter_s_keys() -> None:
    assert len(PROXIES.client_of("10.0.0.5", ["x" * 10_000])) == 64


def test_a_malformed_proxy_entry_is_refused() -> None:
    with pytest.raises(ValueError):
        TrustedProxies.parse(["10.0.0.0/33"])
