"""Agents on Kubernetes authenticate with their pod's projected ServiceAccount token, verified by the API server.

A bearer token shaped as a JWT (fleetpilot's own tokens never are) is sent to a ``TokenReview`` with our audience.
The review names the ServiceAccount (``system:serviceaccount:NS:SA``, which must be an allowed ``NS/SA``) and, in
``status.user.extra``, the pod the token is bound to and, from Kubernetes 1.30, its node. Older servers name only
the pod: its ``spec.nodeName`` is read, after checking its uid is the token's (a pod recreated under the same name is
another pod). The result is an agent token of that node, so ingest's own node check applies unchanged.

Verdicts are cached by the token's digest for ``cache_seconds`` and never past the token's ``exp`` (read from its
payload without verifying: the review verified it), so the ingest hot path finds a known token without a call to the
API server. Accepted tokens and refusals have caches of their own, each least recently used first: junk tokens (a
refusal each) evict only other refusals, never a good agent's verdict. At most ``max_concurrent_reviews`` reviews run
at once; past that a token is :class:`KubeReviewsBusy` at once, so a slow API server holds that many worker threads,
not the whole pool. An API server that cannot be reached or refuses us is no verdict: it is
:class:`KubeApiUnavailable` (503 with Retry-After, the agent keeps its spool), never cached.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from urllib3.exceptions import HTTPError as Urllib3Error

from web.tokens import Role, TokenInfo, digest
from web.verdict_cache import VerdictCache

EXTRA = "authentication.kubernetes.io/"
NODE_NAME, POD_NAME, POD_UID = f"{EXTRA}node-name", f"{EXTRA}pod-name", f"{EXTRA}pod-uid"
SERVICE_ACCOUNT_USER = "system:serviceaccount:"
# Refusals kept: enough for a fleet's misconfigured agents (a 403 each push otherwise costs a review); a flood of
# junk tokens churns only these.
MAX_REFUSALS_CACHED = 1_000

if TYPE_CHECKING:
    from kubernetes import client


class KubeTokenRefused(Exception):
    """The token is no agent's: ``status`` 401 (not authenticated) or 403 (authenticated, not allowed), ``reason``
    in words."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class KubeApiUnavailable(Exception):
    """No verdict: the API server could not be reached, or refused the server's own requests."""


class KubeReviewsBusy(KubeApiUnavailable):
    """No verdict now: as many TokenReviews are in flight as allowed; the token is answered at once, not queued."""


@dataclass(frozen=True)
class Review:
    """What fleetpilot reads of a TokenReview's ``status``."""

    authenticated: bool
    error: str | None
    username: str
    extra: dict[str, list[str]]
    audiences: list[str] | None


@dataclass(frozen=True)
class PodIdentity:
    """The ServiceAccount and pod a reviewed token belongs to; ``node`` None when the review did not name it."""

    namespace: str
    service_account: str
    pod: str | None
    pod_uid: str | None
    node: str | None


def looks_like_jwt(clear: str) -> bool:
    """Three base64url segments whose first is a JSON object naming ``alg``: a Kubernetes token, never ours."""
    header = _segment(clear, 0)
    return clear.count(".") == 2 and isinstance(header, dict) and "alg" in header


def token_expiry(clear: str) -> float | None:
    """The ``exp`` of a JWT's payload, unverified; None when it has none a number."""
    payload = _segment(clear, 1)
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _segment(clear: str, index: int) -> Any:
    parts = clear.split(".")
    if len(parts) != 3 or len(parts[index]) > 8192:
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(parts[index] + "=" * (-len(parts[index]) % 4)))
    except (binascii.Error, ValueError):
        return None


def _one(extra: dict[str, list[str]], key: str) -> str | None:
    values = extra.get(key) or []
    return values[0] if len(values) == 1 and values[0] else None


def judge_review(review: Review, *, audience: str, allowed: Collection[str]) -> PodIdentity:
    """The pod identity of an accepted review, or KubeTokenRefused saying why not (pure)."""
    if not review.authenticated:
        raise KubeTokenRefused(401, f"the Kubernetes token is not valid: {review.error or 'not authenticated'}")
    if not review.audiences:  # an authenticator that ignores audiences: the token may be another service's
        raise KubeTokenRefused(401, f"the TokenReview does not confirm audience {audience!r} (status.audiences: none)")
    if audience not in review.audiences:
        raise KubeTokenRefused(401, f"the Kubernetes token is not for audience {audience!r} ({review.audiences})")
    namespace, _, account = review.username.removeprefix(SERVICE_ACCOUNT_USER).partition(":")
    if not review.username.startswith(SERVICE_ACCOUNT_USER) or not namespace or not account:
        raise KubeTokenRefused(403, f"{review.username!r} is not a ServiceAccount; agents authenticate as one")
    if f"{namespace}/{account}" not in allowed:
        raise KubeTokenRefused(
            403, f"ServiceAccount {namespace}/{account} may not act as an agent (kubernetes_agent_service_accounts)"
        )
    identity = PodIdentity(
        namespace, account, _one(review.extra, POD_NAME), _one(review.extra, POD_UID), _one(review.extra, NODE_NAME)
    )
    if identity.node is None and (identity.pod is None or identity.pod_uid is None):
        raise KubeTokenRefused(
            403,
            f"the token of ServiceAccount {namespace}/{account} is bound to no pod (no {POD_NAME} claim): "
            "mount a projected ServiceAccount token in the agent's pod",
        )
    return identity


def _review(status: Any) -> Review:
    """The client's ``V1TokenReviewStatus`` as a Review."""
    user = status.user if status is not None else None
    return Review(
        authenticated=bool(status is not None and status.authenticated),
        error=status.error if status is not None else None,
        username=(user.username if user is not None else None) or "",
        extra=dict((user.extra if user is not None else None) or {}),
        audiences=status.audiences if status is not None else None,
    )


class KubeTokenVerifier:
    """Projected ServiceAccount tokens → agent TokenInfo, through TokenReview (and the pod before Kubernetes 1.30)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        audience: str,
        service_accounts: Collection[str],
        cache_seconds: float,
        request_timeout_s: float = 5.0,
        max_concurrent_reviews: int = 8,
        cache_max_tokens: int = 10_000,
    ) -> None:
        from kubernetes import client  # the kubernetes client only where used: an app without it never imports it

        self._authentication = client.AuthenticationV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._audience = audience
        self._allowed = frozenset(service_accounts)
        self._cache_seconds = cache_seconds
        self._timeout_s = request_timeout_s
        self._accepted: VerdictCache[TokenInfo] = VerdictCache(cache_max_tokens)
        self._refused: VerdictCache[KubeTokenRefused] = VerdictCache(MAX_REFUSALS_CACHED)
        self._max_reviews = max_concurrent_reviews
        self._reviews = threading.BoundedSemaphore(max_concurrent_reviews)

    @classmethod
    def from_config(
        cls,
        *,
        audience: str,
        service_accounts: Collection[str],
        cache_seconds: float,
        max_concurrent_reviews: int,
        cache_max_tokens: int,
        in_cluster: bool | None = None,
    ) -> KubeTokenVerifier:
        """In a pod the server's own ServiceAccount, else kubeconfig (as ``KubernetesActuator.from_config``); a
        missing configuration is a ValueError, so the server stops at start with the reason."""
        from autoscaler.actuators.kubernetes_client import (  # the kubernetes client only where used
            KubeConfigError,
            api_client,
        )

        try:
            client = api_client(in_cluster=in_cluster)
        except KubeConfigError as exc:
            raise ValueError(f"kubernetes_agent_auth: {exc}") from None
        return cls(
            client,
            audience=audience,
            service_accounts=service_accounts,
            cache_seconds=cache_seconds,
            max_concurrent_reviews=max_concurrent_reviews,
            cache_max_tokens=cache_max_tokens,
        )

    def is_cached(self, clear: str, *, now: float) -> bool:
        """Whether :meth:`verify` would answer from the cache, without a call to the API server."""
        return self._cached(digest(clear), now) is not None

    def verify(self, clear: str, *, now: float) -> TokenInfo:
        """The agent token of the pod's node; KubeTokenRefused, KubeApiUnavailable (KubeReviewsBusy) otherwise."""
        key = digest(clear)
        verdict = self._cached(key, now)
        if verdict is None:
            verdict = self._reviewed(clear, now)
            self._keep(key, verdict, until=self._cache_until(clear, now))
        if isinstance(verdict, KubeTokenRefused):
            raise verdict
        return verdict

    def _keep(self, key: str, verdict: TokenInfo | KubeTokenRefused, *, until: float) -> None:
        if isinstance(verdict, KubeTokenRefused):
            self._refused.put(key, verdict, until=until)
        else:
            self._accepted.put(key, verdict, until=until)

    def _cached(self, key: str, now: float) -> TokenInfo | KubeTokenRefused | None:
        accepted = self._accepted.get(key, now=now)
        return accepted if accepted is not None else self._refused.get(key, now=now)

    def _reviewed(self, clear: str, now: float) -> TokenInfo | KubeTokenRefused:
        """The verdict of a review, within the bound on reviews in flight."""
        if not self._reviews.acquire(blocking=False):
            raise KubeReviewsBusy(
                f"{self._max_reviews} TokenReviews are in flight (kubernetes_token_max_concurrent_reviews)"
            )
        try:
            return self._agent(clear, now)
        except KubeTokenRefused as refused:
            return refused
        finally:
            self._reviews.release()

    def _cache_until(self, clear: str, now: float) -> float:
        """``cache_seconds`` from now, but not past the token's expiry: 60 s cache, exp in 20 s → 20 s."""
        expiry = token_expiry(clear)
        return min(now + self._cache_seconds, expiry if expiry is not None else now)

    def _agent(self, clear: str, now: float) -> TokenInfo:
        identity = judge_review(self._token_review(clear), audience=self._audience, allowed=self._allowed)
        node = identity.node or self._node_of_pod(identity)
        account = f"{identity.namespace}/{identity.service_account}"
        return TokenInfo(f"k8s:{account}:{identity.pod}", f"{account} (pod {identity.pod})", Role.AGENT, node, now)

    def _token_review(self, clear: str) -> Review:
        from kubernetes import client

        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=clear, audiences=[self._audience]))
        answer = self._call("create a TokenReview", self._authentication.create_token_review, body)
        return _review(answer.status)

    def _node_of_pod(self, identity: PodIdentity) -> str:
        """Before Kubernetes 1.30: the node of the pod the token is bound to, if it is still that pod."""
        name, namespace = identity.pod or "", identity.namespace
        gone = KubeTokenRefused(401, f"pod {namespace}/{name} of the token no longer exists")
        # the raw JSON: only two fields are read, and a whole V1Pod model refuses what it does not expect
        answer = self._call(
            f"read pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace, gone=gone, raw=True
        )
        try:
            pod = json.loads(answer.data)
            uid, node = pod["metadata"].get("uid"), pod["spec"].get("nodeName")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise KubeApiUnavailable(f"cannot read pod {namespace}/{name}: the API server answered no Pod") from None
        if uid != identity.pod_uid:
            raise KubeTokenRefused(
                401, f"the token is of an earlier pod {namespace}/{name} (uid {identity.pod_uid}; now {uid})"
            )
        if not isinstance(node, str) or not node:
            raise KubeTokenRefused(403, f"pod {namespace}/{name} of the token is not scheduled to a node")
        return node

    def _call(self, what: str, method: Any, *args: Any, gone: KubeTokenRefused | None = None, raw: bool = False) -> Any:
        """``method(*args)`` (``raw``: its undecoded HTTP answer); a 404 raises ``gone`` when given, any other failure
        KubeApiUnavailable naming ``what``."""
        from kubernetes.client.exceptions import ApiException

        try:
            return method(*args, _request_timeout=self._timeout_s, _preload_content=not raw)
        except ApiException as exc:
            if exc.status == 404 and gone is not None:
                raise gone from None
            raise KubeApiUnavailable(f"cannot {what}: the API server answered {exc.status} {exc.reason}") from None
        except (Urllib3Error, OSError) as exc:
            raise KubeApiUnavailable(f"cannot {what}: the API server is unreachable ({type(exc).__name__})") from None
