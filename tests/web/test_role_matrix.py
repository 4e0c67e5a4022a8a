"""Every API route × every role → allowed or refused, as CONTRACT section 6 says; the table is checked against the
app's own route table, so a route added without a role entry (or one whose dependency disagrees) fails here."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from fleetpilot.settings import ServerSettings
from web.tokens import ROLE_RANK, Role

PUBLIC = "public"
VIEWER, OPERATOR, ADMIN, AGENT, REMOTE_WRITE = Role.VIEWER, Role.OPERATOR, Role.ADMIN, Role.AGENT, Role.REMOTE_WRITE
MACHINES = (AGENT, REMOTE_WRITE)

# (method, path) → the role a caller needs (a higher human role will do), or PUBLIC.
ROLES: dict[tuple[str, str], Role | str] = {
    ("POST", "/api/v1/ingest"): AGENT,
    ("POST", "/api/v1/write"): REMOTE_WRITE,
    ("POST", "/api/v1/otlp/v1/metrics"): REMOTE_WRITE,
    ("GET", "/api/v1/unmapped-families"): VIEWER,
    ("GET", "/api/v1/nodes"): VIEWER,
    ("GET", "/api/v1/nodes/{node_id}"): VIEWER,
    ("GET", "/api/v1/nodes/{node_id}/forecast"): VIEWER,
    ("GET", "/api/v1/series"): VIEWER,
    ("GET", "/api/v1/tokens"): ADMIN,
    ("POST", "/api/v1/tokens"): ADMIN,
    ("DELETE", "/api/v1/tokens/{token_id}"): ADMIN,
    ("GET", "/api/v1/pools"): VIEWER,
    ("POST", "/api/v1/pools"): ADMIN,
    ("GET", "/api/v1/pools/{name}"): VIEWER,
    ("PATCH", "/api/v1/pools/{name}"): OPERATOR,
    ("DELETE", "/api/v1/pools/{name}"): ADMIN,
    ("POST", "/api/v1/pools/{name}/scale"): OPERATOR,
    ("GET", "/api/v1/pools/{name}/forecast"): VIEWER,
    ("GET", "/api/v1/pools/{name}/forecast-accuracy"): VIEWER,
    ("GET", "/api/v1/capacity-plan"): VIEWER,
    ("GET", "/api/v1/scaling-events"): VIEWER,
    ("GET", "/api/v1/routing/weights"): VIEWER,
    ("GET", "/api/v1/tenants"): VIEWER,
    ("POST", "/api/v1/tenants"): ADMIN,
    ("GET", "/api/v1/tenants/{name}"): VIEWER,
    ("PATCH", "/api/v1/tenants/{name}"): OPERATOR,
    ("DELETE", "/api/v1/tenants/{name}"): ADMIN,
    ("PUT", "/api/v1/tenants/{name}/quotas/{pool}"): OPERATOR,
    ("DELETE", "/api/v1/tenants/{name}/quotas/{pool}"): OPERATOR,
    ("GET", "/api/v1/tenants/{name}/keys"): ADMIN,
    ("POST", "/api/v1/tenants/{name}/keys"): ADMIN,
    ("DELETE", "/api/v1/tenants/{name}/keys/{key_id}"): ADMIN,
    ("GET", "/api/v1/enforcement-events"): VIEWER,
    ("GET", "/api/v1/alert-rules"): VIEWER,
    ("POST", "/api/v1/alert-rules"): OPERATOR,
    ("GET", "/api/v1/alert-rules/{rule_id}"): VIEWER,
    ("PATCH", "/api/v1/alert-rules/{rule_id}"): OPERATOR,
    ("DELETE", "/api/v1/alert-rules/{rule_id}"): OPERATOR,
    ("GET", "/api/v1/alerts"): VIEWER,
    ("GET", "/api/v1/silences"): VIEWER,
    ("POST", "/api/v1/silences"): OPERATOR,
    ("DELETE", "/api/v1/silences/{silence_id}"): OPERATOR,
    ("GET", "/api/v1/webhooks"): VIEWER,
    ("POST", "/api/v1/webhooks"): ADMIN,
    ("DELETE", "/api/v1/webhooks/{webhook_id}"): ADMIN,
    ("GET", "/api/v1/webhooks/{webhook_id}/deliveries"): VIEWER,
    ("GET", "/api/v1/audit"): ADMIN,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
}
CALLERS = ["none", "agent", "remote_write", "viewer", "operator", "admin"]


@pytest.fixture
def database_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/matrix.db"  # roles do not depend on the backend


@pytest.fixture
def settings(database_url: str) -> ServerSettings:
    # Every route is asked once without a token: well past the default failed-authentication limit.
    return ServerSettings(database_url=database_url, token_cache_seconds=0, auth_max_failures=10_000)


def published_roles(client: TestClient) -> dict[tuple[str, str], list[list[str]]]:
    """The app's route table as its OpenAPI publishes it: (method, path) → the roles of its security requirements."""
    paths = client.get("/openapi.json").json()["paths"]
    return {
        (method.upper(), path): [roles for requirement in op.get("security", []) for roles in requirement.values()]
        for path, operations in paths.items()
        for method, op in operations.items()
    }


def test_every_route_has_a_role_entry_and_declares_it_by_the_one_dependency(client: TestClient) -> None:
    published = published_roles(client)
    assert sorted(set(published) - set(ROLES)) == [], "routes without a role entry in ROLES"
    assert sorted(set(ROLES) - set(published)) == [], "entries for routes the app does not have"
    for key, roles in published.items():
        needed = ROLES[key]
        assert roles == ([] if needed == PUBLIC else [[needed]]), key


def _allowed(needed: Role | str, caller: str) -> bool:
    if needed == PUBLIC:
        return True
    if caller == "none":
        return False
    if needed in MACHINES or caller in MACHINES:
        return caller == needed
    return ROLE_RANK[Role(caller)] >= ROLE_RANK[Role(needed)]


def _url(path: str) -> str:
    return path.replace("{rule_id}", "1").replace("{", "").replace("}", "")


@pytest.mark.parametrize(("method", "path"), sorted(ROLES), ids=[f"{m} {p}" for m, p in sorted(ROLES)])
def test_each_role_is_allowed_or_refused_as_the_contract_says(
    client: TestClient, auth: Callable[..., dict[str, str]], method: str, path: str
) -> None:
    headers = {
        "none": {},
        "agent": auth("agent", node_id="node-a"),
        "remote_write": auth("remote_write"),
        **{role: auth(role) for role in ("viewer", "operator", "admin")},
    }
    body: dict[str, object] | None = {} if method in ("POST", "PUT", "PATCH") else None
    for caller in CALLERS:
        answer = client.request(method, _url(path), json=body, headers=headers[caller])
        if _allowed(ROLES[(method, path)], caller):
            assert answer.status_code not in (401, 403), (caller, answer.text)
        else:
            assert answer.status_code == (401 if caller == "none" else 403), (caller, answer.text)
            assert answer.json()["error"]["code"] == ("unauthorized" if caller == "none" else "forbidden")
