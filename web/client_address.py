"""The one answer to "who is calling": the connection's address, or what trusted proxies say the client was.

``X-Forwarded-For`` is written by whoever sends it, so it is read only when the connection comes from one of
``trusted_proxies``; from anyone else it is ignored (the failed-authentication limiter keys on the answer, and a
caller that could choose its address would never be slowed). Behind proxies the header lists every hop, each proxy
appending the address it saw: the right-most address that is not a trusted proxy is the client. With proxies
10.0.0.0/8 and ``X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.1.2.3`` from peer 10.0.0.5 → ``203.0.113.9``; the
6.6.6.6 the client wrote itself is never believed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from starlette.requests import HTTPConnection

UNKNOWN = "unknown"
MAX_ADDRESS_CHARS = 64  # a garbage hop from a trusted chain keys the limiter; bound what it may cost

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class TrustedProxies:
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> TrustedProxies:
        """``["10.0.0.5", "10.1.0.0/16"]``; a bare address is a network of one. A malformed entry raises ValueError."""
        return cls(tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries))

    def trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)

    def client_of(self, peer: str | None, forwarded_for: Sequence[str]) -> str:
        """The client address given the connection's ``peer`` and every ``X-Forwarded-For`` header value."""
        if peer is None:
            return UNKNOWN
        if not self.trusts(peer):
            return peer
        hops = [hop.strip() for value in forwarded_for for hop in value.split(",") if hop.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop[:MAX_ADDRESS_CHARS]
        return hops[0] if hops else peer  # every hop a trusted proxy: the first one is the origin


def client_address(connection: HTTPConnection) -> str:
    """The caller's address for the limiter and the logs (proxies from the app's ``trusted_proxies``)."""
    proxies = getattr(connection.app.state, "trusted_proxies", None) or TrustedProxies()
    peer = connection.client.host if connection.client is not None else None
    return proxies.client_of(peer, connection.headers.getlist("x-forwarded-for"))
