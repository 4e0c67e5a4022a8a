"""Security headers on every dashboard response: no inline script may run, no site may frame the dashboard.

Neither scripts nor styles may be inline (``script-src 'self'; style-src 'self'``): the pages' data travels in
``<script type="application/json">`` blocks, which are data, not code, and the charts (uPlot) size their elements
through the DOM's style properties, which the policy does not restrict.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import MutableHeaders

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def secure(headers: MutableHeaders) -> None:
    for name, value in SECURITY_HEADERS.items():
        headers[name] = value


class DashboardRoute(APIRoute):
    """Every route of the dashboard's routers answers with :data:`SECURITY_HEADERS`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def secured(request: Request) -> Response:
            response = await handler(request)
            secure(response.headers)
            return response

        return secured
