"""The fake's ServiceAccount tokens and ``authentication.k8s.io/v1`` TokenReview, answered as the API server does.

``issue_token`` hands out a JWT-shaped token (``header.payload.signature``, its payload carrying ``aud``, ``exp``,
``sub`` and the ``kubernetes.io`` pod and node claims) as the kubelet would project it into a pod. A review of a
token the fake never issued, one past its ``exp`` (by ``kube.clock``), or one none of whose audiences is asked for
answers ``authenticated: false`` with the ``error`` the real server gives; an accepted one names the ServiceAccount
user, the audiences in common and, as ``extra``, the pod (and from Kubernetes 1.30 the node: ``kube.node_name_claims``
False is an older server, without it). ``kube.review_audiences`` False is an authenticator that ignores audiences
(no ``status.audiences``); ``kube.review_gate`` holds every review until it is opened, as a slow API server would.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.support.fake_kube.api import ApiError, RecordedRequest, Route, forbidden, route

if TYPE_CHECKING:
    from tests.support.fake_kube.server import FakeKube

EXTRA = "authentication.kubernetes.io/"


@dataclass(frozen=True)
class IssuedToken:
    """What the fake knows of a token it issued: the pod it was bound to and the claims it carries."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str
    audiences: tuple[str, ...]
    expires_at: float
    jti: str


@dataclass
class ReviewGate:
    """A slow API server: each review waits until ``opened`` is set (at most ``hold_s``), counted while it waits."""

    opened: threading.Event = field(default_factory=threading.Event)
    hold_s: float = 60.0
    waiting: int = 0
    most_waiting: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            self.opened.wait(self.hold_s)
            yield
        finally:
            with self._lock:
                self.waiting -= 1


def _segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def issue_token(
    kube: FakeKube,
    namespace: str,
    service_account: str,
    pod: str,
    node: str,
    *,
    audiences: tuple[str, ...] = ("fleetpilot",),
    expires_in_s: float = 3600.0,
    pod_uid: str | None = None,
) -> str:
    """A projected token of ``service_account`` bound to ``pod`` on ``node``, valid for ``expires_in_s`` from
    ``kube.clock()``; the pod's uid defaults to the one ``kube.add_pod`` gives it."""
    now = kube.clock()
    issued = IssuedToken(
        namespace,
        service_account,
        pod,
        pod_uid or f"uid-{namespace}-{pod}",
        node,
        audiences,
        now + expires_in_s,
        secrets.token_hex(8),
    )
    payload = {
        "aud": list(audiences),
        "exp": int(issued.expires_at),
        "iat": int(now),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": issued.jti,
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
        "kubernetes.io": {
            "namespace": namespace,
            "node": {"name": node, "uid": f"uid-node-{node}"},
            "pod": {"name": pod, "uid": issued.pod_uid},
            "serviceaccount": {"name": service_account, "uid": f"uid-sa-{service_account}"},
        },
    }
    token = f"{_segment({'alg': 'RS256', 'kid': 'fake'})}.{_segment(payload)}.{secrets.token_urlsafe(32)}"
    kube.service_account_tokens[token] = issued
    return token


def review_status(kube: FakeKube, token: str, asked: list[str]) -> dict[str, Any]:
    """The ``status`` of a TokenReview of ``token`` for the audiences ``asked`` (none asked: the server's own,
    which the fake takes to be every audience the token has)."""
    issued = kube.service_account_tokens.get(token)
    if issued is None:
        error = "square/go-jose: compact JWS format must have three parts" if token.count(".") != 2 else "invalid"
        return {"authenticated": False, "user": {}, "error": f"[invalid bearer token, {error}]"}
    if kube.clock() >= issued.expires_at:
        return {
            "authenticated": False,
            "user": {},
            "error": "[invalid bearer token, service account token has expired]",
        }
    common = [audience for audience in issued.audiences if not asked or audience in asked]
    if not common:
        return {
            "authenticated": False,
            "user": {},
            "error": f"[invalid bearer token, token audiences {json.dumps(list(issued.audiences))} is invalid for "
            f"the target audiences {json.dumps(asked)}]",
        }
    extra = {
        f"{EXTRA}credential-id": [f"JTI={issued.jti}"],
        f"{EXTRA}pod-name": [issued.pod],
        f"{EXTRA}pod-uid": [issued.pod_uid],
    }
    if kube.node_name_claims:
        extra |= {f"{EXTRA}node-name": [issued.node], f"{EXTRA}node-uid": [f"uid-node-{issued.node}"]}
    user = {
        "username": f"system:serviceaccount:{issued.namespace}:{issued.service_account}",
        "uid": f"uid-sa-{issued.service_account}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{issued.namespace}", "system:authenticated"],
        "extra": extra,
    }
    if not kube.review_audiences:
        return {"authenticated": True, "user": user}
    return {"authenticated": True, "user": user, "audiences": common}


@route("POST", r"^/apis/authentication\.k8s\.io/v1/tokenreviews$")
def create_token_review(kube: FakeKube, request: RecordedRequest, match: re.Match[str]) -> dict[str, Any]:
    forbidden(kube, "create", "tokenreviews", "authentication.k8s.io", "")
    try:
        review = json.loads(request.body)
        spec = review["spec"]
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "the body of the request is no TokenReview") from None
    token, asked = spec.get("token") or "", spec.get("audiences") or []
    return {
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": review_status(kube, token, asked),
    }


ROUTES: list[Route] = [create_token_review]
