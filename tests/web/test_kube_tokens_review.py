"""The pure part of Kubernetes agent authentication: what a TokenReview's status means, and the token's shape."""

from __future__ import annotations

import base64
import json
import re

import pytest

from web.kube_tokens import (
    NODE_NAME,
    POD_NAME,
    POD_UID,
    KubeTokenRefused,
    PodIdentity,
    Review,
    judge_review,
    looks_like_jwt,
    token_expiry,
)

ALLOWED = {"fleetpilot/fleetpilot-agent"}
USER = "system:serviceaccount:fleetpilot:fleetpilot-agent"
BOUND = {POD_NAME: ["agent-a"], POD_UID: ["u1"], NODE_NAME: ["node-a"]}


def review(
    *,
    authenticated: bool = True,
    error: str | None = None,
    username: str = USER,
    extra: dict[str, list[str]] = BOUND,
    audiences: list[str] | None = None,
) -> Review:
    return Review(authenticated, error, username, extra, ["fleetpilot"] if audiences is None else audiences)


def test_an_accepted_review_names_the_pod_and_node() -> None:
    assert judge_review(review(), audience="fleetpilot", allowed=ALLOWED) == PodIdentity(
        "fleetpilot", "fleetpilot-agent", "agent-a", "u1", "node-a"
    )
    pre_1_30 = judge_review(
        review(extra={POD_NAME: ["agent-a"], POD_UID: ["u1"]}), audience="fleetpilot", allowed=ALLOWED
    )
    assert pre_1_30.node is None and pre_1_30.pod == "agent-a"


@pytest.mark.parametrize(
    ("given", "code", "reason"),
    [
        (review(authenticated=False, error="[invalid bearer token, x]"), 401, "not valid: [invalid bearer token, x]"),
        (review(audiences=["vault"]), 401, "not for audience 'fleetpilot'"),
        (Review(True, None, USER, BOUND, None), 401, "does not confirm audience 'fleetpilot' (status.audiences: none)"),
        (Review(True, None, USER, BOUND, []), 401, "does not confirm audience 'fleetpilot' (status.audiences: none)"),
        (review(username="alice"), 403, "'alice' is not a ServiceAccount"),
        (review(username="system:serviceaccount:fleetpilot:"), 403, "is not a ServiceAccount"),
        (review(username="system:serviceaccount:kube-system:admin"), 403, "kube-system/admin may not act as an agent"),
        (review(extra={}), 403, "bound to no pod"),
        (review(extra={POD_NAME: ["a", "b"], POD_UID: ["u1"]}), 403, "bound to no pod"),
    ],
    ids=[
        "not-authenticated",
        "audience",
        "no-audiences",
        "empty-audiences",
        "not-a-service-account",
        "empty-name",
        "not-allowed",
        "unbound",
        "two-pods",
    ],
)
def test_a_refused_review_says_why(given: Review, code: int, reason: str) -> None:
    with pytest.raises(KubeTokenRefused, match=re.escape(reason)) as refused:
        judge_review(given, audience="fleetpilot", allowed=ALLOWED)
    assert refused.value.status == code


def jwt(header: object, payload: object) -> str:
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(payload)}.sig"


@pytest.mark.parametrize(
    ("token", "is_jwt", "exp"),
    [
        (jwt({"alg": "RS256"}, {"exp": 1_800_000_000}), True, 1_800_000_000.0),
        (jwt({"alg": "RS256"}, {"exp": "soon"}), True, None),
        (jwt({"alg": "RS256"}, {"exp": True}), True, None),
        (jwt({"typ": "JWT"}, {"exp": 1}), False, 1.0),
        ("fp_0123abcd_secret-part", False, None),
        ("a.b.c", False, None),
    ],
)
def test_the_shape_and_expiry_of_a_token(token: str, is_jwt: bool, exp: float | None) -> None:
    assert looks_like_jwt(token) is is_jwt
    assert token_expiry(token) == exp
