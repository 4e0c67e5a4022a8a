"""``GET /settings``: API tokens (admins create — the secret shown once — and revoke them), webhooks (admins add and
remove them) and the routing weights a gateway reads (everyone). Each change goes through the REST API's own
function, so it is checked, refused and audited as the API does it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from alerting.webhooks import TargetKind, WebhookStore
from autoscaler.routing import routing_weights
from fleet.pools import Coefficients
from web.auth import ServicesDep
from web.changes.audit import AuditorDep
from web.changes.tokens import apply_token_create, apply_token_delete
from web.changes.webhooks import apply_webhook_create, apply_webhook_delete
from web.dashboard.deps import Admin, CsrfForm, DashboardUser, Viewer, field, validation_problem
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.errors import ApiError
from web.schemas.tokens import TokenIn
from web.schemas.webhooks import WebhookIn
from web.services import AppServices
from web.tokens import Role

router = APIRouter(route_class=DashboardRoute)
DONE = {
    "revoked": "Token revoked: its sessions and API calls stop working.",
    "hook": "Webhook added.",
    "unhooked": "Webhook removed.",
}


def _weights(services: AppServices) -> list[dict[str, Any]]:
    """Every up node's routing weight with the default α/β/γ, lowest (best) first, as ``/routing/weights`` answers."""
    fleet = services.fleet.read(services.clock())
    scores = routing_weights(list(fleet.node_loads), Coefficients())
    rows = [
        {
            "node": n.node_id,
            "weight": scores[n.node_id],
            "compute": n.compute_util,
            "memory": n.mem_util,
            "latency": n.network_latency_s,
        }
        for n in fleet.node_loads
        if n.node_id in scores
    ]
    return sorted(rows, key=lambda r: (r["weight"], r["node"]))


def _page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    *,
    status_code: int = 200,
    error: str = "",
    form: FormData | None = None,
    new_token: str | None = None,
) -> HTMLResponse:
    admin = user.can(Role.ADMIN.value)
    return page(
        request,
        "settings.html",
        user,
        status_code=status_code,
        tokens=services.tokens.list() if admin else [],
        hooks=WebhookStore(services.engine).list(),
        weights=_weights(services),
        roles=[r.value for r in Role],
        kinds=[k.value for k in TargetKind],
        error=error,
        form=form,
        new_token=new_token,
        done=DONE.get(request.query_params.get("done", "")),
    )


@router.get("/settings", response_class=HTMLResponse)
def settings(request: Request, user: Viewer, services: ServicesDep) -> HTMLResponse:
    return _page(request, user, services)


@router.post("/settings/tokens", response_class=HTMLResponse)
def create_token(request: Request, user: Admin, form: CsrfForm, services: ServicesDep, audit: AuditorDep) -> Response:
    """The API's token POST (``apply_token_create``). Answers the page itself (not a redirect) so the new secret is
    shown exactly once and never in a URL."""
    try:
        body = TokenIn.model_validate(
            {"role": field(form, "role"), "name": field(form, "name"), "node_id": field(form, "node_id") or None}
        )
        _info, clear = apply_token_create(audit, body, now=services.clock())
    except ValidationError as exc:
        return _page(request, user, services, status_code=422, error=validation_problem(exc)[1], form=form)
    except ApiError as exc:
        return _page(request, user, services, status_code=exc.status_code, error=exc.message, form=form)
    response = _page(request, user, services, status_code=201, new_token=clear)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/settings/tokens/{token_id}/revoke", response_class=HTMLResponse)
def revoke_token(
    token_id: str, request: Request, user: Admin, _form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's token DELETE (``apply_token_delete``): its sessions and API calls stop working."""
    try:
        apply_token_delete(audit, token_id, verifier=services.tokens)
    except ApiError as exc:
        return _page(request, user, services, status_code=exc.status_code, error=exc.message)
    return RedirectResponse("/settings?done=revoked", status_code=303)


@router.post("/settings/webhooks", response_class=HTMLResponse)
def add_webhook(request: Request, user: Admin, form: CsrfForm, services: ServicesDep, audit: AuditorDep) -> Response:
    """The API's webhook POST (``apply_webhook_create``)."""
    try:
        body = WebhookIn.model_validate(
            {
                "url": field(form, "url"),
                "secret": field(form, "secret") or None,
                "kind": field(form, "kind") or "webhook",
                "name": field(form, "name"),
            }
        )
        apply_webhook_create(audit, body, services)
    except ValidationError as exc:
        return _page(request, user, services, status_code=422, error=validation_problem(exc)[1], form=form)
    except ApiError as exc:
        return _page(request, user, services, status_code=exc.status_code, error=exc.message, form=form)
    return RedirectResponse("/settings?done=hook", status_code=303)


@router.post("/settings/webhooks/{hook_id}/delete", response_class=HTMLResponse)
def delete_webhook(
    hook_id: str, request: Request, user: Admin, _form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's webhook DELETE (``apply_webhook_delete``)."""
    try:
        apply_webhook_delete(audit, hook_id)
    except ApiError as exc:
        return _page(request, user, services, status_code=exc.status_code, error=exc.message)
    return RedirectResponse("/settings?done=unhooked", status_code=303)
