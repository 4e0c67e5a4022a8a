"""Who may read ``/metrics``, ``/openapi.json`` and ``/docs`` when ``scrape_token`` is set (unset: anyone, as
Prometheus scrapes usually are): ``Authorization: Bearer <scrape_token>`` or any valid API token; the API's
description also opens to a signed-in dashboard user, whose browser sends a cookie rather than a header."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from web.auth import ServicesDep, bearer_token, identify
from web.dashboard.deps import current_session, get_state
from web.services import AppServices


def scrape_token_given(request: Request, scrape_token: str) -> bool:
    """Compared in constant time, so the answer's timing says nothing about how much of a guess was right."""
    clear = bearer_token(request)
    return clear is not None and hmac.compare_digest(clear.encode(), scrape_token.encode())


def scrape_access(*, dashboard_session: bool) -> Callable[[Request, AppServices], None]:
    """The check as a dependency: passes, or raises 401 (429 past the failure limit) as the API does."""

    def dependency(request: Request, services: ServicesDep) -> None:
        scrape_token = services.settings.scrape_token
        if scrape_token is None or scrape_token_given(request, scrape_token):
            return
        if dashboard_session and current_session(request, get_state(request), services) is not None:
            return
        identify(services, request)

    return dependency


MetricsAccess = Annotated[None, Depends(scrape_access(dashboard_session=False))]
DocsAccess = Annotated[None, Depends(scrape_access(dashboard_session=True))]
