"""Pages rendered from templates with what every page needs: the signed-in user, the CSRF token, the nav."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from web.dashboard.deps import DashboardUser, get_state

NAV = (
    ("/", "Fleet"),
    ("/pools", "Pools"),
    ("/tenants", "Tenants"),
    ("/alerts", "Alerts"),
    ("/health", "Health"),
    ("/settings", "Settings"),
)


def page(
    request: Request, template: str, user: DashboardUser | None, *, status_code: int = 200, **context: Any
) -> HTMLResponse:
    section = "/" + request.url.path.strip("/").split("/")[0] if request.url.path != "/" else "/"
    if section == "/nodes":
        section = "/"
    response: HTMLResponse = get_state(request).templates.TemplateResponse(
        request,
        template,
        {"user": user, "csrf_token": user.csrf_token if user else "", "nav": NAV, "section": section, **context},
        status_code=status_code,
    )
    return response


def script_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<`` can close the element early."""
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
