"""Which addresses a notification target may reach: a host is resolved, and every address it answers must be public
or inside a network the operator allowed (``webhook_allowed_networks``), so that a webhook URL cannot make the server
POST to its own loopback, the private network behind it or the cloud metadata service (SSRF).

The check judges addresses, not names: ``2130706433``, ``0x7f000001``, ``[::ffff:127.0.0.1]`` and ``localhost`` are
all 127.0.0.1 once resolved, and an IPv6 address that carries an IPv4 one (6to4, NAT64, Teredo, ...) is judged by
it. :class:`CheckedTransport` then connects to the very address it checked, so a name that answers a public address
to the check and 127.0.0.1 to the connect (DNS rebinding) gets nowhere.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Protocol

import httpcore
import httpx

from wire.errors import FieldError

IPAddress = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

# AWS, GCP and Azure answer instance credentials here; 169.254.169.254 is link-local too, fd00:ec2::254 private, but
# naming them gives the refusal its own reason.
CLOUD_METADATA: frozenset[IPAddress] = frozenset({ip_address("169.254.169.254"), ip_address("fd00:ec2::254")})
# IPv6 forms that stand for an IPv4 host, its address in their last 32 bits: IPv4-translated (RFC 2765) and NAT64's
# well-known prefix (RFC 6052; IPv4-mapped ::ffff:0:0/96 is ``ipv4_mapped``). An address in them is that IPv4 host.
TRANSLATED = (IPv6Network("::ffff:0:0:0/96"), IPv6Network("64:ff9b::/96"))


class AddressRefused(ValueError):
    """A target's host resolves to an address it may not reach; ``reason`` is one of a small fixed set."""

    def __init__(self, address: IPAddress, reason: str) -> None:
        carried = embedded_ipv4(address)
        it = f"it carries {carried}; " if carried is not None else ""
        super().__init__(f"{address} is {reason} ({it}allow it with webhook_allowed_networks)")
        self.address = address
        self.reason = reason


class Resolver(Protocol):
    def __call__(self, host: str, port: int) -> list[IPAddress]: ...


def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The addresses the socket layer would connect to (OSError when none), so every numeric spelling that
    ``inet_aton`` accepts reads as the address it means: ``2130706433`` and ``0x7f000001`` are 127.0.0.1."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ip_address(info[4][0]) for info in infos))


@dataclass(frozen=True)
class FakeResolver:
    """Answers from a table of names; each lookup pops the name's next answer (its last repeats), so a test can make
    a name change its address between the check at creation and the send (rebinding)."""

    answers: dict[str, list[list[str]]]
    asked: list[str] = field(default_factory=list)

    def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        script = self.answers.get(host)
        if not script:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answer = script.pop(0) if len(script) > 1 else script[0]
        return [ip_address(a) for a in answer]


def embedded_ipv4(address: IPAddress) -> IPv4Address | None:
    """The IPv4 address an IPv6 transition form carries, where a packet to it ends up: IPv4-mapped, IPv4-translated
    and NAT64 (:data:`TRANSLATED`), 6to4 ``2002::/16`` (the tunnel's far end) and Teredo ``2001::/32`` (the client
    behind its NAT); None for any other address."""
    if isinstance(address, IPv4Address):
        return None
    if _stands_for_ipv4(address):
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return address.teredo[1] if address.teredo is not None else None


def _stands_for_ipv4(address: IPAddress) -> bool:
    """An IPv4-mapped or translated form: the IPv4 host itself, not a tunnel towards it."""
    return isinstance(address, IPv6Address) and (
        address.ipv4_mapped is not None or any(address in network for network in TRANSLATED)
    )


def refusal(address: IPAddress) -> str | None:
    """Why no target may reach ``address`` (None: a public one). An IPv6 address carrying an IPv4 one is judged by
    it: ``::ffff:127.0.0.1``, ``64:ff9b::7f00:1`` and 6to4's ``2002:7f00:1::`` are loopback; a translated form of a
    public address is public, a tunnel's (6to4, Teredo) is then judged as the IPv6 address it is too."""
    carried = embedded_ipv4(address)
    if carried is not None:
        inside = refusal(carried)
        if inside is not None or _stands_for_ipv4(address):
            return inside
    if address in CLOUD_METADATA:
        return "cloud-metadata"
    flags = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("site-local", isinstance(address, IPv6Address) and address.is_site_local),  # fec0::/10, deprecated
        # what is left outside the public internet, e.g. the carrier-grade NAT range 100.64.0.0/10
        ("not-global", not address.is_global),
    )
    return next((reason for reason, flagged in flags if flagged), None)


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """``["127.0.0.0/8", "::1/128"]`` as networks; ValueError naming the setting for a CIDR that is not one."""
    try:
        return tuple(ip_network(c.strip(), strict=False) for c in cidrs)
    except ValueError as exc:
        raise FieldError("webhook_allowed_networks", f"{exc}") from None


@dataclass(frozen=True)
class AddressPolicy:
    allowed_networks: tuple[Network, ...] = ()
    resolver: Resolver = system_resolver

    @classmethod
    def allowing(cls, cidrs: Sequence[str], resolver: Resolver = system_resolver) -> AddressPolicy:
        return cls(parse_networks(cidrs), resolver)

    def check(self, address: IPAddress) -> None:
        """AddressRefused unless ``address`` is public or inside an allowed network (the IPv4 address it carries
        included: ``2002:7f00:1::`` passes where ``127.0.0.0/8`` is allowed)."""
        reason = refusal(address)
        if reason is None:
            return
        forms = {address, embedded_ipv4(address)} - {None}
        if not any(form in network for form in forms for network in self.allowed_networks):
            raise AddressRefused(address, reason)

    def checked_addresses(self, host: str, port: int) -> list[IPAddress]:
        """Every address ``host`` resolves to, once; AddressRefused if any one may not be reached (a name that answers
        one public and one loopback address is refused whole); OSError if it does not resolve."""
        addresses = self.resolver(host, port)
        for address in addresses:
            self.check(address)
        return addresses


class CheckedBackend(httpcore.NetworkBackend):
    """httpcore's sockets, connected to the addresses the policy checked instead of the name. The Host header is
    httpx's (from the URL) and TLS gets the name for SNI and certificate checks: httpcore passes the origin's host to
    ``start_tls``, not the address connected to."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self._policy.checked_addresses(host, port)
        except OSError as exc:  # does not resolve: httpx reads this as its ConnectError
            raise httpcore.ConnectError(f"{host} does not resolve") from exc
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return self._sockets.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} has no address")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a notification target is never a unix socket")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class CheckedTransport(httpx.HTTPTransport):
    """httpx's transport over :class:`CheckedBackend`. httpx 0.28 takes no network backend, so the pool it built is
    replaced with the same one over ours (``_pool`` is the attribute ``handle_request`` sends through)."""

    def __init__(self, policy: AddressPolicy) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), network_backend=CheckedBackend(policy)
        )
