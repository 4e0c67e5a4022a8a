"""The server's composition: the first start creates one admin token, printed once when generated, never when given."""

from __future__ import annotations

from fleetpilot.server import bootstrap_admin
from web.services import AppServices
from web.tokens import Role


def test_first_start_creates_one_admin_token_then_never_again(services: AppServices) -> None:
    token = bootstrap_admin(services, None)
    assert token is not None
    info = services.tokens.verify(token, now=0.0)
    assert info is not None
    assert info.role is Role.ADMIN
    assert bootstrap_admin(services, None) is None


def test_an_admin_token_from_settings_is_installed_as_is_and_not_printed(services: AppServices) -> None:
    wanted = "fp_from_a_secret_store_0123456789abcdef"
    assert bootstrap_admin(services, wanted) is None  # nothing to print: whoever set it knows it
    assert services.tokens.verify(wanted, now=0.0) is not None
