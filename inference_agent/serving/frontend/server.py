"""The agent's serving API on ``--serve-port`` (CONTRACT section 11): admit, queue, route, proxy.

Routes: ``POST /v1/completions`` and ``/v1/chat/completions`` (streamed too) for text pools, ``POST /v1/classify``
for classify pools, ``GET /v1/models``. A request names its pool in ``model``, or the model a pool serves
(``model_routes.py``); the replicas are built-in ones or an engine profile's (a vLLM, an SGLang): to the front end
they are endpoints. Its tenant is named by its key, ``Authorization: Bearer <tenant key>``, checked against the key
digests of the control plane's desired state (``tenant_identity.py``: a trusted gateway may name it in a header
instead; no key is the shared ``default`` tenant). Order of checks, first from the request's head, its body unread:
a length over the cap (``TEXT_BODY_BYTES`` for text) → 413; an unknown or revoked key → 401; no room among the
bodies being read now (``body_budget.py``) → 503; then from the body, bounded before it is decoded
(``schema.parse_json``): a body without a valid ``model`` → 422; an unknown pool or model → 404; the rest of the body
→ 422; the tenant over its quota → 429 with ``Retry-After``; the front end draining, no ready replica, or the pool's
queue full or too slow → 503.
Admitted requests go to the least-loaded ready replica (``dispatch.py``: in flight, plus its engine's own queue when
``waiting`` is given) over loopback; streams are relayed chunk by chunk, and a client that leaves closes the
replica's stream, which aborts the generation. A replica that fails mid-stream (killed, reset) ends the client's
stream with an OpenAI error event, ``data: {"error": {...}}``, and no ``[DONE]``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property

import httpx

from inference_agent.http_server import ConnectionLimits, Server
from inference_agent.serving.frontend.admission import (
    DEFAULT_TENANT,
    QuotaBook,
    TenantState,
    Verdict,
    admit,
    prune,
    release,
)
from inference_agent.serving.frontend.body_budget import BodyBudget
from inference_agent.serving.frontend.dispatch import Dispatcher, NoCapacity, Waiting, nothing_waiting
from inference_agent.serving.frontend.handler import handler_for
from inference_agent.serving.frontend.model_routes import Routed, UnknownModel, route
from inference_agent.serving.frontend.refusal import Refusal
from inference_agent.serving.frontend.schema import parse_json
from inference_agent.serving.frontend.tenant_identity import GatewayTrust, UnknownKey, identify
from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.routing import Endpoint, PoolRoutes
from inference_agent.torch_runtime.api import Priority
from wire.control import DesiredState

PRUNE_EVERY_S = 10.0  # idle admission states are dropped this often: at 1,000 requests/s, one sweep per 10,000


@dataclass(frozen=True)
class FrontendLimits:
    max_in_flight_per_replica: int = 32
    max_queue_per_pool: int = 256
    queue_timeout_s: float = 30.0
    max_body_bytes_in_flight: int = 64 * 1024 * 1024  # four of the largest (16 MiB) bodies read at once


def dispatcher_for(limits: FrontendLimits, waiting: Waiting = nothing_waiting) -> Dispatcher:
    """The replica slots of a front end with ``limits``; ``waiting``: replica id → requests waiting in that replica's
    engine as last scraped (``dispatch.py``)."""
    return Dispatcher(
        max_in_flight=limits.max_in_flight_per_replica, max_queue=limits.max_queue_per_pool, waiting=waiting
    )


@dataclass(frozen=True)
class TenantDirectory:
    """The tenants the control plane named (their policies and key digests), swapped whole on each desired state."""

    book: QuotaBook
    keys: Mapping[str, str]  # a live key's digest → its tenant

    @cached_property
    def known(self) -> frozenset[str]:
        return frozenset(self.book.tenants) | frozenset(self.keys.values()) | {DEFAULT_TENANT}


class Frontend:
    def __init__(
        self,
        routes: Callable[[], Mapping[str, PoolRoutes]],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: FrontendLimits = FrontendLimits(),
        quotas: QuotaBook | None = None,
        keys: Mapping[str, str] | None = None,
        gateway: GatewayTrust | None = None,
        telemetry: ServingTelemetry | None = None,
        clock: Callable[[], float] = time.monotonic,
        connections: ConnectionLimits | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        """``dispatcher``: the replica slots it takes and gives back, shared with whoever counts what it has in flight
        or queued (the supervisor, the probes); by default its own, sized by ``limits`` (``dispatcher_for``)."""
        self.routes = routes
        self.limits = limits
        self.gateway = gateway or GatewayTrust()
        self._directory = TenantDirectory(quotas or QuotaBook(), keys or {})
        self.telemetry = telemetry
        self.clock = clock
        self.dispatcher = dispatcher or dispatcher_for(limits)
        self.client = httpx.Client(
            timeout=httpx.Timeout(600.0, connect=1.0),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=128),
        )
        self.bodies = BodyBudget(limits.max_body_bytes_in_flight)
        self.draining = False
        self._tenants: dict[tuple[str, str], TenantState] = {}
        self._pruned_at = clock()
        self._admission_lock = threading.Lock()
        # a trusted gateway is one address carrying many callers: it is not held to the per-peer bound
        bounds = replace(connections or ConnectionLimits(), unbounded_peers=self.gateway.networks)
        self._server = Server(host, port, handler_for(self), name="serving-frontend", limits=bounds)

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._server.start()

    def close(self) -> None:
        self._server.close()
        self.client.close()

    @property
    def quotas(self) -> QuotaBook:
        return self._directory.book

    def apply_desired(self, desired: DesiredState) -> None:
        """Take the tenants' policies and key digests of a desired state (none when absent: every key is refused
        and every caller is ``default``)."""
        directory = TenantDirectory(QuotaBook.from_desired(desired, self.quotas.anonymous), desired.tenant_keys)
        directory.known  # computed here, once, not by the first request after the swap  # noqa: B018
        self._directory = directory
        with self._admission_lock:
            self._prune(self.clock())

    def tenant_states(self) -> int:
        """(tenant, pool) admission states held now: bounded by the known tenants (and ``default``) times pools."""
        return len(self._tenants)

    def identify(self, authorization: str | None, gateway_tenant: str | None, peer: str) -> str:
        """The request's tenant, or Refusal(401) for a key that names none."""
        directory = self._directory  # one read: the keys and the names of the same desired state
        try:
            return identify(
                authorization, gateway_tenant, peer, keys=directory.keys, known=directory.known, trust=self.gateway
            )
        except UnknownKey as exc:
            hint = f"send Authorization: Bearer <tenant key>, or no key for {DEFAULT_TENANT!r}"
            raise Refusal(401, f"{exc}: {hint}") from None

    # ---- one request, step by step
    def check(self, path: str, raw: bytes) -> Routed:
        """Validate; answers the pool, whether it streams, its token cost and the body to pass on, or raises
        BadRequest / Refusal."""
        try:
            routed = route(path, parse_json(raw), raw, self.routes())
        except UnknownModel as exc:
            raise Refusal(404, str(exc)) from None
        if self.draining:
            raise Refusal(503, "this node is draining", "5")
        return routed

    def kv_share(self, tenant: str, pool: str) -> float | None:
        return self.quotas.policy(tenant).quota(pool).kv_share

    def admit(self, tenant: str, pool: str, cost_tokens: int = 0) -> int:
        """Take the tenant's tokens and slot; answers the request's priority or raises Refusal(429)."""
        policy = self.quotas.policy(tenant)
        now = self.clock()
        with self._admission_lock:
            if now - self._pruned_at >= PRUNE_EVERY_S:
                self._prune(now)
            key = (tenant, pool)
            state = self._tenants.get(key, TenantState())
            decision, self._tenants[key] = admit(state, policy, pool, now, cost_tokens)
        if decision.verdict is not Verdict.ADMIT:
            what = _REFUSED_QUOTA[decision.verdict]
            raise Refusal(
                429, f"tenant {tenant!r} is over its {what} quota on pool {pool!r}", decision.retry_after_header
            )
        return int(decision.priority)

    def _prune(self, now: float) -> None:
        """Drop idle states (call with the admission lock held); a tenant no longer known becomes ``default``, so its
        state goes once its last request leaves."""
        self._tenants = prune(self._tenants, self.quotas, now)
        self._pruned_at = now

    def leave(self, tenant: str, pool: str) -> None:
        with self._admission_lock:
            key = (tenant, pool)
            self._tenants[key] = release(self._tenants.get(key, TenantState()))

    def slot(self, pool: str, priority: int, exclude: frozenset[str] = frozenset()) -> Endpoint:
        def ready() -> tuple[Endpoint, ...]:
            routes = self.routes().get(pool)
            return tuple(e for e in routes.ready if e.replica_id not in exclude) if routes else ()

        if self.telemetry is not None:
            self.telemetry.queued.labels(pool).set(self.dispatcher.queued(pool))
        try:
            return self.dispatcher.acquire(pool, ready, Priority(priority), self.limits.queue_timeout_s)
        except NoCapacity as exc:
            raise Refusal(503, str(exc), "1") from None
        finally:
            if self.telemetry is not None:
                self.telemetry.queued.labels(pool).set(self.dispatcher.queued(pool))


_REFUSED_QUOTA = {
    Verdict.RATE_LIMITED: "rate",
    Verdict.TOKENS_LIMITED: "tokens/s",
    Verdict.CONCURRENCY_LIMITED: "concurrency",
}
