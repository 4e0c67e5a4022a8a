"""Authentication before the body, and a cap on every body: a pure ASGI middleware in front of the routes.

FastAPI reads and parses a route's body before its dependencies run, so the role check came after the whole body
was in memory: 300 MB posted to ``/pools`` without a token grew the server by 0.9 GB before its 401. Here a request
that carries a body to ``/api/v1/*`` is refused 401 (429 past the failure limit) before a byte is read unless its
bearer token is valid, and every body — API and dashboard forms alike — is capped at ``api_max_body_bytes``: by its
``Content-Length`` at once, and while streaming for a chunked one (413, in the one error shape). Ingest is left out:
it authenticates first itself and has its own, larger ``ingest_max_body_bytes`` for gzipped batches.
"""

from __future__ import annotations

from fastapi import HTTPException, status
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.auth import identify
from web.errors import ApiError, error_response
from web.services import AppServices

API_PREFIX = "/api/v1/"
# Routes that authenticate before reading and bound their own body (ingest: 8 MiB by default, gzip checked; remote
# write and OTLP alike).
OWN_LIMIT_PATHS = frozenset({"/api/v1/ingest", "/api/v1/write", "/api/v1/otlp/v1/metrics"})


def declared_length(headers: Headers) -> int | None:
    """The ``Content-Length`` when it is a number; None for a chunked or malformed one (the stream is counted)."""
    value = headers.get("content-length", "")
    return int(value) if value.isdigit() else None


def carries_body(headers: Headers) -> bool:
    """Whether a body follows: a positive length, or chunked (HTTP/1.1 has no other way to send one)."""
    length = declared_length(headers)
    return (length is not None and length > 0) or "transfer-encoding" in headers


def capped(receive: Receive, max_bytes: int) -> Receive:
    """``receive`` that refuses 413 once more than ``max_bytes`` of body has arrived, before keeping the excess."""
    received = 0

    async def receive_capped() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_bytes:
                raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"body is over {max_bytes} bytes")
        return message

    return receive_capped


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OWN_LIMIT_PATHS or not carries_body(Headers(scope=scope)):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = await self._refusal(request)
        if refusal is not None:
            answer = error_response(refusal.status_code, refusal.message, headers=refusal.headers)
            await answer(scope, receive, send)
            return
        await self.app(scope, capped(receive, self.max_body_bytes), send)

    async def _refusal(self, request: Request) -> ApiError | None:
        """Why the body is not read: no valid token for the API (checked in a worker: it reads the database), or a
        declared length over the cap (a 2 MiB ``Content-Length`` against 1 MiB is refused before its first byte)."""
        if request.url.path.startswith(API_PREFIX):
            services: AppServices = request.app.state.services
            try:
                await run_in_threadpool(identify, services, request)
            except ApiError as exc:
                return exc
        length = declared_length(request.headers)
        if length is not None and length > self.max_body_bytes:
            return ApiError(status.HTTP_413_CONTENT_TOO_LARGE, f"body of {length} bytes is over {self.max_body_bytes}")
        return None
