"""ETags from versions and If-Match on every edit of a versioned resource (pools, tenants and their quotas, alert
rules): a stale edit is 412 with the current version and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from web.etags import parse_if_match

Auth = Callable[..., dict[str, str]]
RULE = {"name": "hot", "kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": 85}


@pytest.mark.parametrize(
    ("header", "versions"),
    [
        (None, None),
        ("*", None),
        ('"3"', {3}),
        ('W/"3"', {3}),
        ("3", {3}),
        ('"3", "5"', {3, 5}),
        ('"abc"', set()),
        ("", None),
    ],
)
def test_parse_if_match(header: str | None, versions: set[int] | None) -> None:
    parsed = parse_if_match(header)
    assert parsed == (None if versions is None else frozenset(versions))


@dataclass(frozen=True)
class Resource:
    """How to create one versioned resource, where it lives, and one edit of it."""

    create_path: str
    create_body: dict[str, Any]
    path: str  # with {id} for an id the create answer gives
    edit_method: str
    edit_path: str
    edit_body: dict[str, Any]
    field: str  # a field the edit changes, read back to prove a refused edit changed nothing


RESOURCES = {
    "pool": Resource(
        "/api/v1/pools",
        {"name": "chat", "max_replicas": 6},
        "/api/v1/pools/chat",
        "PATCH",
        "/api/v1/pools/chat",
        {"max_replicas": 9},
        "max_replicas",
    ),
    "pool scale": Resource(
        "/api/v1/pools",
        {"name": "chat", "max_replicas": 6},
        "/api/v1/pools/chat",
        "POST",
        "/api/v1/pools/chat/scale",
        {"replicas": 3},
        "manual",
    ),
    "tenant": Resource(
        "/api/v1/tenants",
        {"name": "acme"},
        "/api/v1/tenants/acme",
        "PATCH",
        "/api/v1/tenants/acme",
        {"slo_class": "batch"},
        "slo_class",
    ),
    "quota": Resource(
        "/api/v1/tenants",
        {"name": "acme"},
        "/api/v1/tenants/acme",
        "PUT",
        "/api/v1/tenants/acme/quotas/chat",
        {"max_concurrency": 4},
        "quotas",
    ),
    "alert rule": Resource(
        "/api/v1/alert-rules",
        RULE,
        "/api/v1/alert-rules/{id}",
        "PATCH",
        "/api/v1/alert-rules/{id}",
        {"threshold": 90},
        "threshold",
    ),
}


@pytest.mark.parametrize("kind", list(RESOURCES))
def test_get_answers_the_etag_and_if_match_guards_every_edit(client: TestClient, auth: Auth, kind: str) -> None:
    r = RESOURCES[kind]
    admin = auth("admin")
    created = client.post(r.create_path, json=r.create_body, headers=admin)
    assert created.status_code == 201 and created.headers["ETag"] == '"1"'
    path, edit_path = (p.replace("{id}", str(created.json().get("id"))) for p in (r.path, r.edit_path))
    edit_body = r.edit_body
    read = client.get(path, headers=auth("viewer"))
    assert read.headers["ETag"] == '"1"'

    first = client.request(r.edit_method, edit_path, json=edit_body, headers={**admin, "If-Match": '"1"'})
    assert first.status_code == 200, first.text
    assert first.headers["ETag"] == '"2"' and client.get(path, headers=admin).headers["ETag"] == '"2"'
    after_first = client.get(path, headers=admin).json()[r.field]

    stale = client.request(r.edit_method, edit_path, json=edit_body, headers={**admin, "If-Match": '"1"'})
    assert stale.status_code == 412 and stale.json()["error"]["current_version"] == 2
    assert client.get(path, headers=admin).json()[r.field] == after_first
    assert client.get(path, headers=admin).json()["version"] == 2

    any_version = client.request(r.edit_method, edit_path, json=edit_body, headers={**admin, "If-Match": "*"})
    assert any_version.status_code == 200 and any_version.headers["ETag"] == '"3"'


@pytest.mark.parametrize(
    ("kind", "create_path", "body", "path"),
    [
        ("pool", "/api/v1/pools", {"name": "chat"}, "/api/v1/pools/chat"),
        ("tenant", "/api/v1/tenants", {"name": "acme"}, "/api/v1/tenants/acme"),
        ("rule", "/api/v1/alert-rules", RULE, "/api/v1/alert-rules/{id}"),
    ],
)
def test_a_stale_delete_is_412_and_keeps_the_resource(
    client: TestClient, auth: Auth, kind: str, create_path: str, body: dict[str, Any], path: str
) -> None:
    admin = auth("admin")
    created = client.post(create_path, json=body, headers=admin).json()
    path = path.replace("{id}", str(created.get("id")))
    refused = client.delete(path, headers={**admin, "If-Match": '"7"'})
    assert refused.status_code == 412 and refused.json()["error"]["current_version"] == 1
    assert client.get(path, headers=admin).status_code == 200
    assert client.delete(path, headers={**admin, "If-Match": '"1"'}).status_code == 204
    assert client.get(path, headers=admin).status_code == 404


def test_a_stale_quota_delete_is_412(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    client.post("/api/v1/tenants", json={"name": "acme", "quotas": {"chat": {"max_concurrency": 2}}}, headers=admin)
    refused = client.delete("/api/v1/tenants/acme/quotas/chat", headers={**admin, "If-Match": '"5"'})
    assert refused.status_code == 412
    assert client.get("/api/v1/tenants/acme", headers=admin).json()["quotas"]["chat"]["max_concurrency"] == 2
    assert client.delete("/api/v1/tenants/acme/quotas/chat", headers={**admin, "If-Match": '"1"'}).status_code == 204


def test_if_match_and_a_body_version_together_must_both_hold(client: TestClient, auth: Auth) -> None:
    admin = auth("admin")
    client.post("/api/v1/pools", json={"name": "chat"}, headers=admin)
    both_stale = client.patch(
        "/api/v1/pools/chat", json={"max_replicas": 3, "version": 4}, headers={**admin, "If-Match": '"1"'}
    )
    assert both_stale.status_code == 409  # the header holds; the body's version does not
    assert client.get("/api/v1/pools/chat", headers=admin).json()["version"] == 1
