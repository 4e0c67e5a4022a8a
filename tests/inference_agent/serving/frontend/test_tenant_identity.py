"""Who a serving request comes from, with plain values: key, trusted gateway header, or the default tenant."""

from __future__ import annotations

import pytest

from inference_agent.serving.frontend.admission import DEFAULT_TENANT
from inference_agent.serving.frontend.tenant_identity import GatewayTrust, UnknownKey, bearer, identify
from wire.control import DesiredState, key_digest, new_tenant_key

KEY = "fp_tenant_H1M1YLSXm8Zv_H0eWGkRqawS7fpjf3hFm3fH0sMmcxY"  # fixed: test ids must agree on every xdist worker
KEYS = {key_digest(KEY): "acme"}
KNOWN = frozenset({"acme", "vip", DEFAULT_TENANT})
GATEWAY = GatewayTrust.parse("X-Tenant", ["10.0.0.7", "192.168.0.0/24"])


@pytest.mark.parametrize(
    ("authorization", "header", "peer", "tenant"),
    [
        (None, None, "1.2.3.4", DEFAULT_TENANT),
        (f"Bearer {KEY}", None, "1.2.3.4", "acme"),
        (f"bearer {KEY}", "vip", "1.2.3.4", "acme"),  # an untrusted peer's header names nobody
        (None, "vip", "1.2.3.4", DEFAULT_TENANT),
        (None, "vip", "10.0.0.7", "vip"),  # the gateway's own address
        (None, "vip", "192.168.0.99", "vip"),  # inside its network
        (f"Bearer {KEY}", "vip", "192.168.0.99", "vip"),  # the gateway authenticated its caller
        (None, "made-up", "10.0.0.7", DEFAULT_TENANT),  # a name the control plane never gave gets no state
        ("Basic dXNlcjpwYXNz", None, "1.2.3.4", DEFAULT_TENANT),  # not a tenant key at all
    ],
)
def test_identify(authorization: str | None, header: str | None, peer: str, tenant: str) -> None:
    assert identify(authorization, header, peer, keys=KEYS, known=KNOWN, trust=GATEWAY) == tenant


@pytest.mark.parametrize("authorization", ["Bearer fp_tenant_invented", f"Bearer {KEY}x"])
def test_an_unknown_key_is_refused_rather_than_made_anonymous(authorization: str) -> None:
    with pytest.raises(UnknownKey):
        identify(authorization, None, "1.2.3.4", keys=KEYS, known=KNOWN, trust=GATEWAY)


def test_no_gateway_is_trusted_without_both_settings() -> None:
    assert not GatewayTrust.parse(None, ["10.0.0.7"]).trusts("10.0.0.7")
    assert not GatewayTrust.parse("X-Tenant", []).trusts("10.0.0.7")
    assert not GATEWAY.trusts("not-an-address")
    with pytest.raises(ValueError):
        GatewayTrust.parse("X-Tenant", ["10.0.0.0/33"])


def test_bearer() -> None:
    assert bearer("Bearer  abc ") == "abc"
    assert bearer("Bearer") is None
    assert bearer(None) is None


def test_tenant_key_digests_are_checked_where_the_desired_state_is_read() -> None:
    assert DesiredState.model_validate({}).tenant_keys == {}
    with pytest.raises(ValueError, match="tenant_keys"):
        DesiredState.model_validate({"tenant_keys": {"not-a-digest": "acme"}})
    made = new_tenant_key()
    assert made.startswith("fp_tenant_") and len(made) > 50
