"""The serving API's HTTP routes over one front end (``server.py`` says what each answer means): ``/healthz`` and
``/v1/models``; a request's head checked before its body is read; then its body checked, its tenant admitted, a
replica slot taken and the request proxied, a stream relayed chunk by chunk."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, ClassVar

import httpx

from inference_agent.http_server import ClientGone, JsonHandler
from inference_agent.serving.frontend.admission import DEFAULT_TENANT
from inference_agent.serving.frontend.body_budget import BodyLease
from inference_agent.serving.frontend.model_routes import ROUTES, Routed, model_list
from inference_agent.serving.frontend.refusal import Refusal
from inference_agent.serving.frontend.schema import MAX_PROMPT_BYTES, BadRequest, error_event
from inference_agent.serving.replica.handler import KV_SHARE_HEADER, PRIORITY_HEADER, QUEUED_HEADER

if TYPE_CHECKING:
    from inference_agent.serving.frontend.server import Frontend

log = logging.getLogger(__name__)
# a text request's body: its prompt is at most 64 KiB, 384 KiB once escaped (\u00e9 is 6 bytes for 2), with room for
# the sampling fields, tools and a response format; the rest of the serving cap is for classify's images
TEXT_BODY_BYTES = 16 * MAX_PROMPT_BYTES


class FrontendHandler(JsonHandler):
    frontend: ClassVar[Frontend]  # the front end whose requests it answers (``handler_for``)

    def on_get(self, path: str) -> None:
        if path == "/healthz":
            pools = {
                n: {"kind": r.kind, "ready": len(r.ready), "starting": r.starting}
                for n, r in self.frontend.routes().items()
            }
            anonymous = asdict(self.frontend.quotas.policy(DEFAULT_TENANT).fallback)
            self.answer_json(
                503 if self.frontend.draining else 200, {"pools": pools, "anonymous_quota_per_pool": anonymous}
            )
        elif path == "/v1/models":
            self.answer_json(200, {"object": "list", "data": model_list(self.frontend.routes())})
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
        self._lease = self.frontend.bodies.lease(length)
        if self._lease is None:
            budget = self.frontend.bodies.max_bytes
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
                routed = self.frontend.check(path, raw)
            finally:  # decoded and checked: from here it holds its own body, not the budget
                self.after_body()
            pool = routed.pool
            priority = self.frontend.admit(tenant, pool, routed.cost_tokens)
            try:
                code = self._route(path, routed, tenant, priority, started)
            finally:
                self.frontend.leave(tenant, pool)
        except BadRequest as exc:
            code = 422
            self.answer_json(code, exc.body())
        except Refusal as exc:
            self._refuse(exc, pool)
            return
        if self.frontend.telemetry is not None:
            self.frontend.telemetry.requests.labels(pool, str(code)).inc()

    def _refuse(self, refusal: Refusal, pool: str, close: bool = False) -> None:
        headers = {"Retry-After": refusal.retry_after} if refusal.retry_after else {}
        if refusal.code == 401:
            headers["WWW-Authenticate"] = "Bearer"
        self.answer_json(refusal.code, {"detail": refusal.detail}, headers=headers or None, close=close)
        if self.frontend.telemetry is not None:
            self.frontend.telemetry.requests.labels(pool, str(refusal.code)).inc()

    def _tenant(self) -> str:
        header = self.frontend.gateway.header
        gateway_tenant = self.headers.get(header) if header else None
        return self.frontend.identify(self.headers.get("Authorization"), gateway_tenant, self.client_address[0])

    def _route(self, path: str, routed: Routed, tenant: str, priority: int, started: float) -> int:
        pool = routed.pool
        tried: frozenset[str] = frozenset()
        while True:
            endpoint = self.frontend.slot(pool, priority, tried)
            headers = {
                **endpoint.auth_headers,  # the replica's key: it believes the headers below from us alone
                "Content-Type": "application/json",
                "X-Tenant": tenant,
                PRIORITY_HEADER: str(priority),
                QUEUED_HEADER: f"{time.monotonic() - started:.6f}",
            }
            kv_share = self.frontend.kv_share(tenant, pool)
            if kv_share is not None:
                headers[KV_SHARE_HEADER] = f"{kv_share:.4f}"
            try:
                return self._proxy(f"{endpoint.url}{path}", routed.body, headers, routed.stream)
            except _Retry:
                tried |= {endpoint.replica_id}  # it was draining or gone: try another one once
                if len(tried) > 1:
                    raise Refusal(503, f"no replica of pool {pool} took the request", "1") from None
            finally:
                self.frontend.dispatcher.release(endpoint)

    def _proxy(self, url: str, raw: bytes, headers: dict[str, str], stream: bool) -> int:
        try:
            with self.frontend.client.stream("POST", url, content=raw, headers=headers) as answer:
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


def handler_for(frontend: Frontend) -> type[FrontendHandler]:
    """The handler class of ``frontend``'s server (the server makes one handler per connection)."""

    class BoundHandler(FrontendHandler):
        pass

    BoundHandler.frontend = frontend
    return BoundHandler


class _Retry(Exception):
    """The replica refused before doing any work (draining, or gone): another replica may take the request."""
