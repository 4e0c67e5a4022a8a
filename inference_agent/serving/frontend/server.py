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

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import cached_property

import httpx

from inference_agent.http_server import ClientGone, ConnectionLimits, JsonHandler, Server
from inference_agent.serving.frontend.admission import (
    DEFAULT_TENANT,
    QuotaBook,
    TenantState,
    Verdict,
    admit,
    prune,
    release,
)
from inference_agent.serving.frontend.body_budget import BodyBudget, BodyLease
from inference_agent.serving.frontend.dispatch import Dispatcher, NoCapacity, Waiting, nothing_waiting
from inference_agent.serving.frontend.model_routes import ROUTES, Routed, UnknownModel, model_list, route
from inference_agent.serving.frontend.schema import MAX_PROMPT_BYTES, BadRequest, error_event, parse_json
from inference_agent.serving.frontend.tenant_identity import GatewayTrust, UnknownKey, identify
from inference_agent.serving.replica.handler import KV_SHARE_HEADER, PRIORITY_HEADER, QUEUED_HEADER
from inference_agent.serving.reporting.telemetry import ServingTelemetry
from inference_agent.serving.routing import Endpoint, PoolRoutes
from inference_agent.torch_runtime.api import Priority
from wire.control import DesiredState

log = logging.getLogger(__name__)
# a text request's body: its prompt is at most 64 KiB, 384 KiB once escaped (\u00e9 is 6 bytes for 2), with room for
# the sampling fields, tools and a response format; the rest of the serving cap is for classify's images
TEXT_BODY_BYTES = 16 * MAX_PROMPT_BYTES
PRUNE_EVERY_S = 10.0  # idle admission states are dropped this often: at 1,000 requests/s, one sweep per 10,000


@dataclass(frozen=True)
class FrontendLimits:
    max_in_flight_per_replica: int = 32
    max_queue_per_pool: int = 256
    queue_timeout_s: float = 30.0
    max_body_bytes_in_flight: int = 64 * 1024 * 1024  # four of the largest (16 MiB) bodies read at once


class Refusal(Exception):
    def __init__(self, code: int, detail: str, retry_after: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.retry_after = retry_after


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
        waiting: Waiting = nothing_waiting,
    ) -> None:
        """``waiting``: replica id → requests waiting in that replica's engine as last scraped (``dispatch.py``)."""
        self.routes = routes
        self.limits = limits
        self.gateway = gateway or GatewayTrust()
        self._directory = TenantDirectory(quotas or QuotaBook(), keys or {})
        self.telemetry = telemetry
        self.clock = clock
        self.dispatcher = Dispatcher(
            max_in_flight=limits.max_in_flight_per_replica, max_queue=limits.max_queue_per_pool, waiting=waiting
        )
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
        self._server = Server(host, port, _handler(self), name="serving-frontend", limits=bounds)

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

    def queued(self, pool: str) -> int:
        return self.dispatcher.queued(pool)

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


def _handler(frontend: Frontend) -> type[JsonHandler]:
    class FrontendHandler(JsonHandler):
        def on_get(self, path: str) -> None:
            if path == "/healthz":
                pools = {
                    n: {"kind": r.kind, "ready": len(r.ready), "starting": r.starting}
                    for n, r in frontend.routes().items()
                }
                anonymous = asdict(frontend.quotas.policy(DEFAULT_TENANT).fallback)
                self.answer_json(
                    503 if frontend.draining else 200, {"pools": pools, "anonymous_quota_per_pool": anonymous}
                )
            elif path == "/v1/models":
                self.answer_json(200, {"object": "list", "data": model_list(frontend.routes())})
            else:
                self.answer_json(404, {"detail": f"not found: {path}"})

        def before_body(self, path: str, length: int) -> bool:
            """From the head alone, the body unread: a text body over its cap (413), the key (401), then the body's
            room among those being read (503)."""
            self._lease: BodyLease | None = None
            if path not in ROUTES:
                self.answer_json(404, {"detail": f"not found: {path}; try one of {sorted(ROUTES)}"}, close=True)
                return False
            if ROUTES[path] == "text" and length > TEXT_BODY_BYTES:
                detail = f"a request body to {path} is at most {TEXT_BODY_BYTES} bytes; this one is {length}"
                self._refuse(Refusal(413, detail), "-", close=True)
                return False
            try:
                self._tenant_name = self._tenant()
            except Refusal as exc:
                self._refuse(exc, "-", close=True)
                return False
            self._lease = frontend.bodies.lease(length)
            if self._lease is None:
                budget = frontend.bodies.max_bytes
                self._refuse(Refusal(503, f"this node is reading {budget} bytes of other bodies", "1"), "-", True)
                return False
            return True

        def after_body(self) -> None:
            if self._lease is not None:
                self._lease.release()

        def on_post(self, path: str, raw: bytes) -> None:
            pool = "-"
            started = time.monotonic()
            tenant = self._tenant_name
            try:
                try:
                    routed = frontend.check(path, raw)
                finally:  # decoded and checked: from here it holds its own body, not the budget
                    self.after_body()
                pool = routed.pool
                priority = frontend.admit(tenant, pool, routed.cost_tokens)
                try:
                    code = self._route(path, routed, tenant, priority, started)
                finally:
                    frontend.leave(tenant, pool)
            except BadRequest as exc:
                code = 422
                self.answer_json(code, exc.body())
            except Refusal as exc:
                self._refuse(exc, pool)
                return
            if frontend.telemetry is not None:
                frontend.telemetry.requests.labels(pool, str(code)).inc()

        def _refuse(self, refusal: Refusal, pool: str, close: bool = False) -> None:
            headers = {"Retry-After": refusal.retry_after} if refusal.retry_after else {}
            if refusal.code == 401:
                headers["WWW-Authenticate"] = "Bearer"
            self.answer_json(refusal.code, {"detail": refusal.detail}, headers=headers or None, close=close)
            if frontend.telemetry is not None:
                frontend.telemetry.requests.labels(pool, str(refusal.code)).inc()

        def _tenant(self) -> str:
            header = frontend.gateway.header
            gateway_tenant = self.headers.get(header) if header else None
            return frontend.identify(self.headers.get("Authorization"), gateway_tenant, self.client_address[0])

        def _route(self, path: str, routed: Routed, tenant: str, priority: int, started: float) -> int:
            pool = routed.pool
            tried: frozenset[str] = frozenset()
            while True:
                endpoint = frontend.slot(pool, priority, tried)
                headers = {
                    **endpoint.auth_headers,  # the replica's key: it believes the headers below from us alone
                    "Content-Type": "application/json",
                    "X-Tenant": tenant,
                    PRIORITY_HEADER: str(priority),
                    QUEUED_HEADER: f"{time.monotonic() - started:.6f}",
                }
                kv_share = frontend.kv_share(tenant, pool)
                if kv_share is not None:
                    headers[KV_SHARE_HEADER] = f"{kv_share:.4f}"
                try:
                    return self._proxy(f"{endpoint.url}{path}", routed.body, headers, routed.stream)
                except _Retry:
                    tried |= {endpoint.replica_id}  # it was draining or gone: try another one once
                    if len(tried) > 1:
                        raise Refusal(503, f"no replica of pool {pool} took the request", "1") from None
                finally:
                    frontend.dispatcher.release(endpoint)

        def _proxy(self, url: str, raw: bytes, headers: dict[str, str], stream: bool) -> int:
            try:
                with frontend.client.stream("POST", url, content=raw, headers=headers) as answer:
                    if answer.status_code == 503:
                        raise _Retry
                    if not stream or answer.status_code != 200:
                        self._relay(answer)
                        return answer.status_code
                    self.start_stream(200, answer.headers.get("content-type", "text/event-stream"))
                    return self._relay_stream(url, answer)
            except httpx.ConnectError:
                raise _Retry from None
            except httpx.HTTPError as exc:
                log.warning("replica at %s failed mid-request: %s", url, exc)
                raise Refusal(503, "the replica failed; retry", "1") from None

        def _relay_stream(self, url: str, answer: httpx.Response) -> int:
            """Relay the replica's events; if it fails mid-stream, end the client's stream with an error event."""
            last = b"\n\n"
            try:
                for chunk in answer.iter_raw():
                    self.write_chunk(chunk)
                    last = (last + chunk)[-2:]
            except ClientGone:
                return 499  # leaving the block closes the replica's stream, which aborts the request
            except httpx.HTTPError as exc:
                log.warning("replica at %s failed mid-stream: %s", url, exc)
                # a replica killed mid-write leaves half an event: end it before the error so the client parses both
                ending = b"" if last == b"\n\n" else b"\n\n"
                try:
                    self.write_chunk(ending + error_event("the replica failed mid-stream; retry the request"))
                except ClientGone:
                    return 499
                self.end_stream()
                self.close_connection = True
                return 502
            self.end_stream()
            return 200

        def _relay(self, answer: httpx.Response) -> None:
            payload = answer.read()
            extra = {"Retry-After": answer.headers["retry-after"]} if "retry-after" in answer.headers else None
            self.answer_bytes(
                answer.status_code, payload, answer.headers.get("content-type", "application/json"), headers=extra
            )

    return FrontendHandler


class _Retry(Exception):
    """The replica refused before doing any work (draining, or gone): another replica may take the request."""
