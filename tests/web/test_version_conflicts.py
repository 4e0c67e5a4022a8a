"""One VersionConflict for every versioned resource: a stale body ``version`` on a pool, a tenant (its class or a
quota) or an alert rule is 409 ``conflict`` naming the version the resource is at now, and the store's error
carries kind, name, expected and current."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from alerting.rule_store import RuleStore
from alerting.rules import RuleSpec
from fleet.pools import PoolSpec, PoolStore
from fleet.versions import VersionConflict
from isolation.tenants import TenantStore
from web.services import AppServices
from wire.control import SloClass

Auth = Callable[..., dict[str, str]]
RULE = {"name": "GpuHot", "kind": "threshold", "metric": "gpu_temperature_celsius", "op": ">", "threshold": 85}


def _edited_twice(client: TestClient, auth: Auth, create: tuple[str, dict[str, Any]], edit: tuple[str, Any]) -> Any:
    """Create the resource, edit it once at version 1 (now 2), then again at version 1: the stale edit's answer."""
    operator = auth("admin")
    created = client.post(create[0], json=create[1], headers=operator)
    assert created.status_code == 201, created.text
    path = edit[0].format(id=created.json().get("id"))
    method = "PUT" if "/quotas/" in path else "PATCH"
    first = client.request(method, path, json={**edit[1], "version": 1}, headers=operator)
    assert first.status_code == 200, first.text
    return client.request(method, path, json={**edit[1], "version": 1}, headers=operator)


@pytest.mark.parametrize(
    ("create", "edit", "kind"),
    [
        (("/api/v1/pools", {"name": "chat"}), ("/api/v1/pools/chat", {"max_replicas": 4}), "pool 'chat'"),
        (("/api/v1/tenants", {"name": "acme"}), ("/api/v1/tenants/acme", {"slo_class": "batch"}), "tenant 'acme'"),
        (
            ("/api/v1/tenants", {"name": "acme"}),
            ("/api/v1/tenants/acme/quotas/chat", {"rate_rps": 5}),
            "tenant 'acme'",
        ),
        (("/api/v1/alert-rules", RULE), ("/api/v1/alert-rules/{id}", {"threshold": 90}), "rule "),
    ],
)
def test_a_stale_version_is_409_with_the_current_version(
    client: TestClient, auth: Auth, create: tuple[str, dict[str, Any]], edit: tuple[str, Any], kind: str
) -> None:
    answer = _edited_twice(client, auth, create, edit)
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["current_version"]) == ("conflict", 2)
    assert error["message"].startswith(kind) and "is at version 2, not 1" in error["message"]


def test_each_store_raises_the_one_error_with_what_it_knows(services: AppServices) -> None:
    now = 1.0
    PoolStore(services.engine).create("chat", PoolSpec(), now=now)
    TenantStore(services.engine).create("acme", SloClass.BATCH, {}, now=now)
    rule = RuleStore(services.engine).create(RuleSpec(**RULE), now=now)  # type: ignore[arg-type]
    attempts: list[tuple[Callable[[], object], str, str | int]] = [
        (lambda: PoolStore(services.engine).update("chat", {}, now=now, expected_version=3), "pool", "chat"),
        (
            lambda: TenantStore(services.engine).update("acme", SloClass.STANDARD, now=now, expected_version=3),
            "tenant",
            "acme",
        ),
        (lambda: RuleStore(services.engine).update(rule.id, {}, now=now, expected_version=3), "rule", rule.id),
    ]
    for attempt, kind, name in attempts:
        with pytest.raises(VersionConflict) as caught:
            attempt()
        assert (caught.value.kind, caught.value.name, caught.value.expected, caught.value.current) == (kind, name, 3, 1)
