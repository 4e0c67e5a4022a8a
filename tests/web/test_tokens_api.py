"""Tokens: created by admins, shown once, stored hashed, roles enforced."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete, select

from tests.support.clock import FakeClock
from web.tables import api_tokens
from web.tokens import REVOCATION_CHECK_SECONDS, Role, TokenInfo, TokenStore, digest

Auth = Callable[..., dict[str, str]]


@pytest.mark.parametrize(
    ("holder", "needed", "allowed"),
    [
        (Role.ADMIN, Role.OPERATOR, True),
        (Role.ADMIN, Role.VIEWER, True),
        (Role.OPERATOR, Role.ADMIN, False),
        (Role.OPERATOR, Role.VIEWER, True),
        (Role.VIEWER, Role.OPERATOR, False),
        (Role.AGENT, Role.VIEWER, False),
        (Role.ADMIN, Role.AGENT, False),
        (Role.AGENT, Role.AGENT, True),
    ],
)
def test_role_ladder(holder: Role, needed: Role, allowed: bool) -> None:
    info = TokenInfo("id", "name", holder, "n" if holder is Role.AGENT else None, 0.0)
    assert info.can_act_as(needed) is allowed


def test_admin_creates_a_token_that_works_and_is_stored_hashed(client: TestClient, auth: Auth, engine: Engine) -> None:
    created = client.post("/api/v1/tokens", json={"role": "viewer", "name": "grafana"}, headers=auth("admin"))
    assert created.status_code == 201, created.text
    clear = created.json()["token"]
    viewer = {"Authorization": f"Bearer {clear}"}
    assert client.get("/api/v1/nodes", headers=viewer).status_code == 200
    with engine.connect() as conn:
        stored = conn.execute(select(api_tokens).where(api_tokens.c.id == created.json()["id"])).one()._mapping
    assert stored["token_hash"] == digest(clear)
    assert clear not in str(dict(stored))
    listed = client.get("/api/v1/tokens", headers=auth("admin")).json()["items"]
    assert "grafana" in [t["name"] for t in listed]
    assert all("token" not in t for t in listed)


def test_deleted_token_stops_working(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    created = client.post("/api/v1/tokens", json={"role": "viewer"}, headers=admin).json()
    assert client.delete(f"/api/v1/tokens/{created['id']}", headers=admin).status_code == 204
    assert client.get("/api/v1/nodes", headers={"Authorization": f"Bearer {created['token']}"}).status_code == 401
    assert client.delete(f"/api/v1/tokens/{created['id']}", headers=admin).status_code == 404


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_only_admins_manage_tokens(client: TestClient, auth: Auth, role: str) -> None:
    headers = auth(role)
    assert client.get("/api/v1/tokens", headers=headers).status_code == 403
    assert client.post("/api/v1/tokens", json={"role": "admin"}, headers=headers).status_code == 403


@pytest.mark.parametrize(
    "body",
    [{"role": "agent"}, {"role": "viewer", "node_id": "node-a"}, {"role": "root"}],
    ids=["agent without node", "node on a viewer", "unknown role"],
)
def test_bad_token_requests_are_422(client: TestClient, auth: Auth, body: dict[str, str]) -> None:
    assert client.post("/api/v1/tokens", json=body, headers=auth("admin")).status_code == 422


def test_a_token_deleted_by_another_process_dies_within_the_revocation_check(engine: Engine, clock: FakeClock) -> None:
    store = TokenStore(engine, cache_seconds=300)
    info, clear = store.create(Role.VIEWER, now=clock())
    assert store.verify(clear, now=clock()) == info
    other_process = TokenStore(engine, cache_seconds=300)
    other_process.delete(info.id)
    assert store.verify(clear, now=clock() + REVOCATION_CHECK_SECONDS / 2) == info  # still cached in this process
    assert store.verify(clear, now=clock() + REVOCATION_CHECK_SECONDS) is None  # the table changed: cache dropped


def test_a_verdict_is_served_from_the_cache_until_its_ttl_without_a_lookup(engine: Engine, clock: FakeClock) -> None:
    """Between the token table's changes a node pushing every 5 s is not looked up again: the row removed behind the
    store's back (no change counted) still verifies until the cache period ends."""
    store = TokenStore(engine, cache_seconds=300)
    info, clear = store.create(Role.AGENT, now=clock(), node_id="node-a")
    assert store.verify(clear, now=clock()) == info
    with engine.begin() as conn:
        conn.execute(delete(api_tokens))
    assert store.verify(clear, now=clock() + 200) == info
    assert store.is_cached(clear, now=clock() + 200.5)
    assert store.verify(clear, now=clock() + 301) is None


def test_a_token_created_elsewhere_works_here_within_the_check(engine: Engine, clock: FakeClock) -> None:
    """An unknown token's verdict is cached too; its creation elsewhere counts as a change, so it is not refused
    for the whole cache period."""
    store = TokenStore(engine, cache_seconds=300)
    secret = "fp_known_" + "s" * 43
    assert store.verify(secret, now=clock()) is None
    info, _ = TokenStore(engine).create(Role.VIEWER, now=clock(), secret=secret)
    assert store.verify(secret, now=clock() + REVOCATION_CHECK_SECONDS) == info


def test_unknown_tokens_cannot_evict_the_verdicts_of_known_ones(engine: Engine, clock: FakeClock) -> None:
    """A flood of unknown tokens (issue 35: 10,400 junk tokens flushed the verdict cache) costs only other unknown
    verdicts: the known token is still answered from the cache, the row removed behind the store's back proving no
    second lookup happened."""
    store = TokenStore(engine, cache_seconds=300)
    info, clear = store.create(Role.AGENT, now=clock(), node_id="node-a")
    assert store.verify(clear, now=clock()) == info
    with engine.begin() as conn:
        conn.execute(delete(api_tokens))
    for n in range(10_400):
        assert store.verify(f"fp_junk{n:05d}_" + "j" * 40, now=clock()) is None
    assert store.is_cached(clear, now=clock() + 0.5)
    assert store.verify(clear, now=clock() + 0.5) == info
