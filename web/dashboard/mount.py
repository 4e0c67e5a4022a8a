"""The dashboard mounted on the app: its routers, its per-process state and how its refusals are answered."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from web.dashboard.deps import CsrfRefused, LoginRequired, PageNotFound, RoleTooLow, get_state
from web.dashboard.pages import adopt, alerts, assets, fleet, health, login, nodes, pools, settings, tenants
from web.dashboard.security import secure
from web.dashboard.state import build_state
from web.services import AppServices


def mount_dashboard(app: FastAPI, services: AppServices) -> None:
    app.state.dashboard = build_state(services.settings, services.engine)
    for module in (login, fleet, nodes, pools, adopt, tenants, alerts, health, settings, assets):
        app.include_router(module.router, include_in_schema=False)

    @app.exception_handler(LoginRequired)
    async def to_login(_request: Request, exc: LoginRequired) -> Response:
        target = "/login" if exc.next_path in ("/", "/login") else f"/login?{urlencode({'next': exc.next_path})}"
        response = RedirectResponse(target, status_code=303)
        secure(response.headers)
        return response

    @app.exception_handler(RoleTooLow)
    async def role_too_low(request: Request, exc: RoleTooLow) -> Response:
        return _refusal(request, 403, "Not allowed", str(exc))

    @app.exception_handler(PageNotFound)
    async def not_found(request: Request, exc: PageNotFound) -> Response:
        return _refusal(request, 404, "Not found", str(exc))

    @app.exception_handler(CsrfRefused)
    async def csrf_refused(request: Request, exc: CsrfRefused) -> Response:
        return _refusal(request, 403, "Form refused", str(exc))


def _refusal(request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
    response = get_state(request).templates.TemplateResponse(
        request, "refused.html", {"title": title, "message": message}, status_code=status_code
    )
    secure(response.headers)
    return response
