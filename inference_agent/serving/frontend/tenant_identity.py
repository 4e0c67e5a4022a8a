"""Who a serving request comes from: its tenant key, a trusted gateway's header, or nobody (the ``default`` tenant).

Pure: given the request's ``Authorization`` and tenant header, the peer address, the keys and the gateway trust,
answer the tenant or raise ``UnknownKey``. Rules, in order:

1. A peer inside ``serve_trusted_gateways`` that sends ``serve_tenant_header`` is believed: the gateway has
   authenticated its callers (its own ``Authorization`` may be meant for someone else).
2. ``Authorization: Bearer <key>`` names the key's tenant; a key the control plane does not know (never issued,
   revoked, or of a tenant deleted) is refused — 401, never a silent fall back to ``default``.
3. Anything else is anonymous: the tenant ``default``, whose callers all share one quota.

A name a gateway sends that the control plane does not know is counted as ``default`` too, so that no caller can
give itself state of its own by inventing names: 20,000 names from a gateway → one bucket.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from inference_agent.http_limits import Network
from inference_agent.serving.frontend.admission import DEFAULT_TENANT
from wire.control import key_digest


class UnknownKey(Exception):
    """A presented tenant key that matches no live key."""


@dataclass(frozen=True)
class GatewayTrust:
    """The header a trusted gateway names the tenant in, and the addresses it may come from (none: trust nobody)."""

    header: str | None = None
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, header: str | None, gateways: Sequence[str]) -> GatewayTrust:
        """From the agent's settings: "10.0.0.7" is one address, "10.0.0.0/24" a network; ValueError on a bad one."""
        return cls(header or None, tuple(ipaddress.ip_network(g.strip(), strict=False) for g in gateways))

    def trusts(self, peer: str) -> bool:
        if self.header is None or not self.networks:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


def bearer(authorization: str | None) -> str | None:
    """The key of ``Authorization: Bearer <key>`` (None without one; a header of another scheme is no key)."""
    if not authorization:
        return None
    scheme, _, credential = authorization.partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None


def identify(
    authorization: str | None,
    gateway_tenant: str | None,
    peer: str,
    *,
    keys: Mapping[str, str],
    known: Collection[str],
    trust: GatewayTrust,
) -> str:
    """The request's tenant (see the module's rules); ``keys`` maps each live key's digest to its tenant (the desired
    state's ``tenant_keys``), ``known`` are the tenants the control plane named."""
    if gateway_tenant and trust.trusts(peer):
        return gateway_tenant if gateway_tenant in known else DEFAULT_TENANT
    key = bearer(authorization)
    if key is None:
        return DEFAULT_TENANT
    tenant = keys.get(key_digest(key))
    if tenant is None:
        raise UnknownKey("unknown or revoked tenant key")
    return tenant
