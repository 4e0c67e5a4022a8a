"""Every request gets an id, answered in ``X-Request-ID`` and written in the audit log beside the change it made.

A caller's own ``X-Request-ID`` is kept when it is a plausible id (1–64 letters, digits, ``-``, ``_``, ``.``), so a
gateway's trace id joins the two logs; anything else is replaced by a fresh one. A plain ASGI middleware, so the
dashboard's server-sent event streams pass through untouched.
"""

from __future__ import annotations

import re
import secrets

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
_PLAUSIBLE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def request_id(request: Request) -> str:
    """The id the middleware gave this request (a fresh one when it did not run, as in a bare router test)."""
    found = request.scope.get("state", {}).get("request_id")
    return found if isinstance(found, str) else secrets.token_hex(8)


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Request(scope).headers.get(HEADER, "")
        rid = given if _PLAUSIBLE.match(given) else secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        await self.app(scope, receive, send_with_id)
