"""Kubernetes agent tokens under abuse (issue 35 #8 and its low item): junk JWT-shaped tokens from an address over
the failure limit never reach TokenReview, concurrent reviews are bounded (past the bound: 503 at once, not a held
worker thread), junk refusals cannot evict good verdicts, and a review that does not confirm our audience is refused.
Each is counted at the fake API server."""

from __future__ import annotations

import base64
import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.clock import FakeClock
from tests.support.fake_kube import FakeKube
from tests.support.fake_kube.tokenreview import ReviewGate, issue_token
from tests.web.test_kube_tokens import AGENT_SA, NS, ingest, reviews, verifier_for
from web.kube_tokens import KubeTokenRefused, KubeTokenVerifier
from web.services import AppServices

FAR_EXP = 4_102_444_800  # 2100-01-01: a verdict would be cached its whole cache_seconds


def junk(index: int) -> str:
    """A JWT-shaped token no API server issued, with a far ``exp``."""

    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part({'exp': FAR_EXP, 'n': index})}.junk-{index}"


@pytest.fixture
def kube(clock: FakeClock) -> Iterator[FakeKube]:
    with FakeKube(clock=clock) as kube:
        kube.add_pod(NS, "agent-a", "node-a", service_account=AGENT_SA)
        yield kube


def test_an_address_over_the_failure_limit_never_reaches_token_review(
    services: AppServices, client: TestClient, kube: FakeKube, clock: FakeClock
) -> None:
    services.kube_tokens = verifier_for(kube)
    good = issue_token(kube, NS, AGENT_SA, "agent-a", "node-a")
    assert ingest(client, good, clock).status_code == 200  # cached before the flood
    codes = [ingest(client, junk(i), clock).status_code for i in range(100)]
    assert codes == [401] * 20 + [429] * 80  # auth_max_failures 20
    assert reviews(kube) == 1 + 20, "only the failures under the limit were reviewed"
    assert ingest(client, good, clock, seq=2).status_code == 200, "a known good token is still served"
    unknown = ingest(client, issue_token(kube, NS, AGENT_SA, "agent-a", "node-a"), clock, seq=3)
    assert unknown.status_code == 429 and "too many failed authentications" in unknown.json()["error"]["message"]
    assert reviews(kube) == 21


def test_concurrent_reviews_are_bounded_and_the_rest_answered_503_at_once(
    services: AppServices, client: TestClient, kube: FakeKube, clock: FakeClock, token: Callable[..., str]
) -> None:
    gate = kube.review_gate = ReviewGate()
    services.kube_tokens = KubeTokenVerifier(
        kube.api_client(),
        audience="fleetpilot",
        service_accounts=[f"{NS}/{AGENT_SA}"],
        cache_seconds=60.0,
        request_timeout_s=60.0,
        max_concurrent_reviews=4,
    )
    tokens = [issue_token(kube, NS, AGENT_SA, "agent-a", "node-a") for _ in range(30)]
    answers: queue.Queue[Any] = queue.Queue()
    threads = [threading.Thread(target=lambda t=t: answers.put(ingest(client, t, clock))) for t in tokens]
    for thread in threads:
        thread.start()
    try:
        refused = [answers.get(timeout=30) for _ in range(26)]  # answered while 4 reviews are held
        assert {a.status_code for a in refused} == {503}
        assert all(a.headers["retry-after"] for a in refused)
        assert (
            "4 TokenReviews are in flight (kubernetes_token_max_concurrent_reviews)"
            in (refused[0].json()["error"]["message"])
        )
        assert gate.most_waiting == 4
        admin = {"Authorization": f"Bearer {token('admin')}"}
        assert client.get("/api/v1/pools", headers=admin).status_code == 200, "the API is served meanwhile"
    finally:
        gate.opened.set()
        for thread in threads:
            thread.join(timeout=60)
    assert [answers.get(timeout=1).status_code for _ in range(4)] == [200] * 4
    assert reviews(kube) == 4


def test_junk_refusals_cannot_evict_good_verdicts(kube: FakeKube, clock: FakeClock) -> None:
    verifier = KubeTokenVerifier(
        kube.api_client(),
        audience="fleetpilot",
        service_accounts=[f"{NS}/{AGENT_SA}"],
        cache_seconds=60.0,
        cache_max_tokens=50,
    )
    good = issue_token(kube, NS, AGENT_SA, "agent-a", "node-a")
    assert verifier.verify(good, now=clock()).node_id == "node-a"
    for i in range(200):  # four times the cache's bound
        with pytest.raises(KubeTokenRefused, match="not valid"):
            verifier.verify(junk(i), now=clock())
    assert verifier.is_cached(good, now=clock())
    assert verifier.verify(good, now=clock()).node_id == "node-a"
    assert reviews(kube) == 1 + 200


def test_good_verdicts_are_evicted_least_recently_used_first(kube: FakeKube, clock: FakeClock) -> None:
    verifier = KubeTokenVerifier(
        kube.api_client(),
        audience="fleetpilot",
        service_accounts=[f"{NS}/{AGENT_SA}"],
        cache_seconds=60.0,
        cache_max_tokens=2,
    )
    first, second, third = (issue_token(kube, NS, AGENT_SA, "agent-a", "node-a") for _ in range(3))
    for clear in (first, second, first, third):  # first used again: second is the least recently used
        verifier.verify(clear, now=clock())
    assert [verifier.is_cached(t, now=clock()) for t in (first, second, third)] == [True, False, True]


def test_a_review_that_does_not_confirm_our_audience_is_refused(
    services: AppServices, client: TestClient, kube: FakeKube, clock: FakeClock
) -> None:
    services.kube_tokens = verifier_for(kube)
    kube.review_audiences = False  # an authenticator that ignored the audience we asked for
    answer = ingest(client, issue_token(kube, NS, AGENT_SA, "agent-a", "node-a"), clock)
    assert answer.status_code == 401
    assert "does not confirm audience 'fleetpilot' (status.audiences: none)" in answer.json()["error"]["message"]
    assert answer.headers["www-authenticate"] == "Bearer"
