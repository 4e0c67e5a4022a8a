"""Issue 15, High 3: the serving port took ``X-Tenant`` at its word. Each attack against a real front end over real
replicas: a tenant is named by its key; a header names nobody unless a trusted gateway sends it; invented names get
no state of their own."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.serving.frontend.admission import DEFAULT_TENANT, Quota, QuotaBook, TenantPolicy
from inference_agent.serving.frontend.server import Frontend
from inference_agent.serving.frontend.tenant_identity import GatewayTrust
from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.routing import PoolRoutes
from inference_agent.torch_runtime.api import CompletionRequest, Priority, TokenEvent
from tests.inference_agent.serving.conftest import StartReplica, start_replica  # noqa: F401  (the fixture)
from wire.control import DesiredState, SloClass, key_digest, new_tenant_key

ACME_KEY, VIP_KEY = new_tenant_key(), new_tenant_key()
BODY = {"model": "p", "prompt": "x", "max_tokens": 1}
TIGHT = Quota(rate_rps=0.01, burst=1.0)  # one request, then nothing for 100 s
BOOK = QuotaBook(
    {
        "acme": TenantPolicy(SloClass.STANDARD, {"p": TIGHT}),
        "acme-2": TenantPolicy(SloClass.STANDARD, {}),  # another tenant, without limits
        "vip": TenantPolicy(SloClass.LATENCY_CRITICAL, {}),
    },
    anonymous=TIGHT,
)
KEYS = {key_digest(ACME_KEY): "acme", key_digest(VIP_KEY): "vip"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def seen(start_replica: StartReplica) -> Iterator[tuple[list[CompletionRequest], PoolRoutes]]:  # noqa: F811
    """A replica of pool ``p`` whose engine records each request it runs (its tenant and priority)."""
    app, endpoint = start_replica("p")
    engine = app.text_engine
    assert engine is not None
    recorded: list[CompletionRequest] = []
    submit = engine.submit

    def recording(request: CompletionRequest) -> Iterator[TokenEvent]:
        recorded.append(request)
        return submit(request)

    engine.submit = recording  # type: ignore[method-assign]
    yield recorded, PoolRoutes("text", (endpoint,))


@pytest.fixture
def frontend(seen: tuple[list[CompletionRequest], PoolRoutes]) -> Iterator[Frontend]:
    routes = {"p": seen[1]}
    made = Frontend(lambda: routes, quotas=BOOK, keys=KEYS)
    made.start()
    yield made
    made.close()


def post(frontend: Frontend, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{frontend.port}/v1/completions", json=BODY, headers=headers)


def test_an_over_quota_client_cannot_become_another_tenant(
    frontend: Frontend, seen: tuple[list[CompletionRequest], PoolRoutes]
) -> None:
    assert post(frontend, bearer(ACME_KEY)).status_code == 200
    assert post(frontend, bearer(ACME_KEY)).status_code == 429
    # naming another tenant beside its key changes nothing: the key names acme, still over its quota
    assert post(frontend, {**bearer(ACME_KEY), "X-Tenant": "acme-2"}).status_code == 429
    # without its key it is anonymous, on the one quota all anonymous callers share, never on acme-2's
    assert post(frontend, {"X-Tenant": "acme-2"}).status_code == 200
    assert post(frontend, {"X-Tenant": "acme-2"}).status_code == 429
    assert [r.tenant for r in seen[0]] == ["acme", DEFAULT_TENANT]  # and it is billed as what it is


def test_callers_without_a_key_share_one_quota_whatever_they_name(frontend: Frontend) -> None:
    assert post(frontend, {}).status_code == 200
    assert post(frontend, {}).status_code == 429
    assert post(frontend, {"X-Tenant": "someone-else"}).status_code == 429
    assert post(frontend, {"X-Tenant": "default"}).status_code == 429


def test_naming_a_latency_critical_tenant_does_not_jump_the_queue(
    frontend: Frontend, seen: tuple[list[CompletionRequest], PoolRoutes]
) -> None:
    assert post(frontend, {"X-Tenant": "vip"}).status_code == 200
    assert post(frontend, bearer(VIP_KEY)).status_code == 200
    assert [(r.tenant, r.priority) for r in seen[0]] == [
        (DEFAULT_TENANT, Priority.STANDARD),
        ("vip", Priority.LATENCY_CRITICAL),
    ]


@pytest.mark.parametrize(
    "key", ["fp_tenant_made-up", "not-even-a-key", ACME_KEY + "x"], ids=["invented", "not-a-key", "one-char-more"]
)
def test_an_unknown_key_is_401_not_the_default_tenant(frontend: Frontend, key: str) -> None:
    refused = post(frontend, bearer(key))
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "unknown or revoked tenant key" in refused.json()["detail"]


def test_a_revoked_key_is_refused_from_the_next_desired_state(frontend: Frontend) -> None:
    vip_only = {"tenants": {"vip": {"slo_class": "latency_critical"}}, "tenant_keys": {key_digest(VIP_KEY): "vip"}}
    frontend.apply_desired(DesiredState.model_validate(vip_only))
    assert post(frontend, bearer(ACME_KEY)).status_code == 401
    assert post(frontend, bearer(VIP_KEY)).status_code == 200


def test_the_header_is_believed_from_a_trusted_gateway_only(seen: tuple[list[CompletionRequest], PoolRoutes]) -> None:
    routes = {"p": seen[1]}
    for trusted, tenant in (("10.9.0.0/16", DEFAULT_TENANT), ("127.0.0.0/8", "vip")):
        gateway = GatewayTrust.parse("X-Tenant", [trusted])
        frontend = Frontend(lambda: routes, quotas=BOOK, keys=KEYS, gateway=gateway)
        frontend.start()
        try:
            assert post(frontend, {"X-Tenant": "vip"}).status_code == 200
        finally:
            frontend.close()
        assert seen[0][-1].tenant == tenant


@pytest.mark.slow  # 20,000 requests over loopback: about 35 s on 2 cores
def test_twenty_thousand_invented_names_leave_the_state_at_its_bound(
    seen: tuple[list[CompletionRequest], PoolRoutes],
) -> None:
    """Requests that pass admission and are refused right after (no ready replica: 503), so that 20,000 of them
    take seconds; before the fix each name kept a bucket of its own forever."""
    registry = CollectorRegistry()
    routes = {"p": PoolRoutes("text", ())}
    book = QuotaBook(BOOK.tenants, anonymous=Quota())  # no limit: every request reaches the replica slot
    frontend = Frontend(lambda: routes, quotas=book, telemetry=ServingTelemetry(registry))
    frontend.start()
    try:
        assert send_names(frontend, 20_000, threads=32) == Counter({503: 20_000})
        bound = (len(BOOK.tenants) + 1) * len(routes)  # known tenants and default, on each pool
        assert frontend.tenant_states() <= bound
        labels = {tuple(s.labels.items()) for m in registry.collect() for s in m.samples if "tenant" in s.labels}
        assert labels == set()  # no metric is labelled by a caller's name
    finally:
        frontend.close()


def send_names(frontend: Frontend, count: int, *, threads: int) -> Counter[int]:
    """``count`` requests, each naming a tenant of its own, over ``threads`` keep-alive clients: their codes."""
    url = f"http://127.0.0.1:{frontend.port}/v1/completions"
    codes: Counter[int] = Counter()

    def send(first: int) -> None:
        with httpx.Client() as client:
            for i in range(first, count, threads):
                codes[client.post(url, json=BODY, headers={"X-Tenant": f"tenant-{i}"}).status_code] += 1

    workers = [threading.Thread(target=send, args=(first,)) for first in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return codes
