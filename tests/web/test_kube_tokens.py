"""Agents on Kubernetes ingest with their pod's projected ServiceAccount token (issue 19, part 3): the app verifies it
with a TokenReview against the fake API server, takes the node from the review (or the pod's spec.nodeName before
Kubernetes 1.30) and scopes the agent to that node; every refusal names why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from collector.tables import samples
from fleetpilot.settings import ServerSettings
from tests.conftest import gpu_sample
from tests.support.clock import FakeClock
from tests.support.fake_kube import FakeKube
from tests.support.fake_kube.tokenreview import issue_token
from web.kube_tokens import KubeApiUnavailable, KubeTokenRefused, KubeTokenVerifier
from web.services import AppServices

NS = "fleetpilot"
AGENT_SA = "fleetpilot-agent"


@pytest.fixture
def kube(clock: FakeClock) -> Iterator[FakeKube]:
    with FakeKube(clock=clock) as kube:
        kube.add_pod(NS, "agent-a", "node-a", service_account=AGENT_SA)
        yield kube


def verifier_for(kube: FakeKube, cache_seconds: float = 60.0) -> KubeTokenVerifier:
    return KubeTokenVerifier(
        kube.api_client(), audience="fleetpilot", service_accounts=[f"{NS}/{AGENT_SA}"], cache_seconds=cache_seconds
    )


@pytest.fixture
def verifier(services: AppServices, kube: FakeKube) -> KubeTokenVerifier:
    services.kube_tokens = verifier_for(kube)
    return services.kube_tokens


def ingest(client: TestClient, token: str, clock: FakeClock, node_id: str = "node-a", seq: int = 1) -> Any:
    body = {"node_id": node_id, "samples": [gpu_sample(seq, clock())]}
    return client.post("/api/v1/ingest", json=body, headers={"Authorization": f"Bearer {token}"})


def reviews(kube: FakeKube) -> int:
    return sum(1 for r in kube.sent("POST") if r.path.endswith("/tokenreviews"))


def stored_nodes(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.scalars(select(samples.c.node_id)))


def test_a_projected_token_ingests_for_its_node(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock, engine: Engine
) -> None:
    token = issue_token(kube, NS, AGENT_SA, "agent-a", "node-a")
    answer = ingest(client, token, clock)
    assert answer.status_code == 200, answer.text
    assert stored_nodes(engine) == ["node-a"]
    review = next(r for r in kube.sent("POST") if r.path.endswith("/tokenreviews"))
    assert b'"audiences": ["fleetpilot"]' in review.body
    assert not kube.sent("GET"), "the node came from the review's bound claims, no pod was read"


def test_a_token_of_another_node_is_forbidden_by_name(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock, engine: Engine
) -> None:
    token = issue_token(kube, NS, AGENT_SA, "agent-a", "node-a")
    answer = ingest(client, token, clock, node_id="node-b")
    assert answer.status_code == 403
    assert "'node-b' is not this token's node ('node-a')" in answer.json()["error"]["message"]
    assert stored_nodes(engine) == []


@pytest.mark.parametrize(
    ("make", "code", "reason"),
    [
        (lambda kube: issue_token(kube, NS, AGENT_SA, "agent-a", "node-a", expires_in_s=-1), 401, "has expired"),
        (
            lambda kube: issue_token(kube, NS, AGENT_SA, "agent-a", "node-a", audiences=("vault",)),
            401,
            'token audiences ["vault"] is invalid for the target audiences ["fleetpilot"]',
        ),
        (
            lambda kube: "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDB9.forged-signature",
            401,
            "the Kubernetes token is not valid: [invalid bearer token",
        ),
        (
            lambda kube: issue_token(kube, NS, "default", "agent-a", "node-a"),
            403,
            "ServiceAccount fleetpilot/default may not act as an agent",
        ),
        (
            lambda kube: issue_token(kube, "other", AGENT_SA, "agent-a", "node-a"),
            403,
            "ServiceAccount other/fleetpilot-agent may not act as an agent",
        ),
    ],
    ids=["expired", "wrong-audience", "forged", "service-account-not-allowed", "same-name-other-namespace"],
)
def test_refusals_name_why(
    client: TestClient,
    kube: FakeKube,
    verifier: KubeTokenVerifier,
    clock: FakeClock,
    engine: Engine,
    make: Any,
    code: int,
    reason: str,
) -> None:
    answer = ingest(client, make(kube), clock)
    assert answer.status_code == code, answer.text
    assert reason in answer.json()["error"]["message"]
    assert stored_nodes(engine) == []
    if code == 401:
        assert answer.headers["www-authenticate"] == "Bearer"


def test_an_unreachable_api_server_is_503_with_retry_after_not_401(
    services: AppServices, client: TestClient, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeKube(clock=clock) as gone:
        token = issue_token(gone, NS, AGENT_SA, "agent-a", "node-a")
        services.kube_tokens = verifier_for(gone)
    answer = ingest(client, token, clock)
    assert answer.status_code == 503
    assert answer.headers["retry-after"]
    assert "the API server is unreachable" in answer.json()["error"]["message"]
    assert token not in caplog.text


def test_a_server_not_allowed_to_create_token_reviews_is_503_and_logged(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock
) -> None:
    kube.forbidden.add("create")
    answer = ingest(client, issue_token(kube, NS, AGENT_SA, "agent-a", "node-a"), clock)
    assert answer.status_code == 503
    assert "cannot create a TokenReview: the API server answered 403" in answer.json()["error"]["message"]


def test_before_kubernetes_1_30_the_node_is_the_pods_spec_node_name(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock, engine: Engine
) -> None:
    kube.node_name_claims = False
    kube.add_pod(NS, "agent-b", "node-b", service_account=AGENT_SA)
    token = issue_token(kube, NS, AGENT_SA, "agent-b", "node-b")
    assert ingest(client, token, clock, node_id="node-b").status_code == 200
    assert [r.path for r in kube.sent("GET")] == [f"/api/v1/namespaces/{NS}/pods/agent-b"]
    assert ingest(client, token, clock, node_id="node-a", seq=2).status_code == 403
    assert stored_nodes(engine) == ["node-b"]


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        ("agent-a", "the token is of an earlier pod fleetpilot/agent-a (uid uid-old; now uid-fleetpilot-agent-a)"),
        ("agent-gone", "pod fleetpilot/agent-gone of the token no longer exists"),
    ],
    ids=["uid-mismatch", "pod-deleted"],
)
def test_before_kubernetes_1_30_a_pod_that_is_not_the_tokens_is_refused(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock, pod: str, reason: str
) -> None:
    kube.node_name_claims = False
    token = issue_token(kube, NS, AGENT_SA, pod, "node-a", pod_uid="uid-old")
    answer = ingest(client, token, clock)
    assert answer.status_code == 401
    assert reason in answer.json()["error"]["message"]


def test_per_node_fleetpilot_tokens_keep_working_beside_it(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock, auth: Any
) -> None:
    headers = auth("agent", "node-a")
    body = {"node_id": "node-a", "samples": [gpu_sample(1, clock())]}
    assert client.post("/api/v1/ingest", json=body, headers=headers).status_code == 200
    other = {"node_id": "node-b", "samples": [gpu_sample(1, clock())]}
    assert client.post("/api/v1/ingest", json=other, headers=headers).status_code == 403
    unknown = client.post("/api/v1/ingest", json=body, headers={"Authorization": "Bearer fp_nope_nope"})
    assert unknown.json()["error"]["message"] == "unknown token"
    assert reviews(kube) == 0, "fleetpilot's own tokens never reach the API server"


def test_the_verdict_is_cached_until_the_cache_or_the_token_expires(
    client: TestClient, kube: FakeKube, verifier: KubeTokenVerifier, clock: FakeClock
) -> None:
    token = issue_token(kube, NS, AGENT_SA, "agent-a", "node-a", expires_in_s=90)
    assert ingest(client, token, clock).status_code == 200
    assert verifier.is_cached(token, now=clock())  # the next push authenticates on the event loop
    assert ingest(client, token, clock, seq=2).status_code == 200
    assert reviews(kube) == 1
    clock.advance(61)  # past the 60 s cache: reviewed again
    assert ingest(client, token, clock, seq=3).status_code == 200
    assert reviews(kube) == 2
    clock.advance(30)  # the token expired at 90 s, before the second verdict's 60 s were over
    assert not verifier.is_cached(token, now=clock())
    answer = ingest(client, token, clock, seq=4)
    assert answer.status_code == 401 and "has expired" in answer.json()["error"]["message"]


def test_a_refusal_is_cached_too_and_an_outage_is_not(services: AppServices, kube: FakeKube, clock: FakeClock) -> None:
    verifier = verifier_for(kube)
    stranger = issue_token(kube, NS, "default", "agent-a", "node-a")
    for _ in range(2):
        with pytest.raises(KubeTokenRefused, match="may not act as an agent"):
            verifier.verify(stranger, now=clock())
    assert reviews(kube) == 1
    kube.forbidden.add("create")
    token = issue_token(kube, NS, AGENT_SA, "agent-a", "node-a")
    with pytest.raises(KubeApiUnavailable, match="answered 403"):
        verifier.verify(token, now=clock())
    assert not verifier.is_cached(token, now=clock())
    kube.forbidden.clear()
    assert verifier.verify(token, now=clock()).node_id == "node-a"


def test_the_settings_name_a_bad_service_account_entry() -> None:
    with pytest.raises(ValueError, match="kubernetes_agent_service_accounts: 'fleetpilot-agent' is not NAMESPACE/NAME"):
        ServerSettings(kubernetes_agent_service_accounts=["fleetpilot-agent"])
    with pytest.raises(ValueError, match="name the agents' ServiceAccounts"):
        ServerSettings(kubernetes_agent_auth=True, kubernetes_agent_service_accounts=[])
