"""``GET /alerts``: pending, firing and resolved alerts (silenced ones marked), silences (operators create and
expire them, through the REST API's own functions and so audited as it audits them) and every webhook with its
delivery log. Reads the alerting room's stores, as its API does."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import AlertStatus
from alerting.outbox import delivery_log
from alerting.silences import silenced
from alerting.webhooks import WebhookStore
from collector.errors import FieldError
from web.audit import AuditorDep
from web.auth import ServicesDep
from web.dashboard.deps import CsrfForm, DashboardUser, Operator, Viewer, field, validation_problem
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.errors import ApiError
from web.routes.alerts import SilenceIn, apply_silence_create, apply_silence_expire
from web.services import AppServices

router = APIRouter(route_class=DashboardRoute)
DELIVERIES_SHOWN = 10
# "alertname=HighTemp", "pool!=chat", "node=~gpu-.*": one matcher per comma-separated part
MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
DONE = {"silenced": "Silence created.", "expired": "Silence expired."}


def parse_matchers(text: str) -> list[dict[str, str]]:
    """``"alertname=HighTemp, pool!=chat"`` → the API's matcher bodies; ValueError naming the part it cannot read."""
    found = []
    for part in (p for p in text.split(",") if p.strip()):
        match = MATCHER.match(part)
        if match is None:
            raise FieldError("matchers", f"{part.strip()!r} is not NAME=VALUE (or !=, =~, !~)")
        found.append({"name": match[1], "op": match[2], "value": match[3]})
    return found


def _page(
    request: Request,
    user: DashboardUser,
    services: AppServices,
    state: str = "",
    *,
    error: str = "",
    form: FormData | None = None,
) -> HTMLResponse:
    now = services.clock()
    silences = SilenceStore(services.engine)
    active = silences.list(active_at=now)
    shown = AlertStore(services.engine).list(status=state or None, limit=100)
    hooks = WebhookStore(services.engine).list()
    return page(
        request,
        "alerts.html",
        user,
        status_code=422 if error else 200,
        alerts=[(a, a.status is not AlertStatus.RESOLVED and silenced(a.labels, active, now)) for a in shown],
        state=state,
        states=[s.value for s in AlertStatus],
        silences=silences.list()[:50],
        now=now,
        hooks=[(h, delivery_log(services.engine, h.id, limit=DELIVERIES_SHOWN)) for h in hooks],
        error=error,
        form=form,
        done=DONE.get(request.query_params.get("done", "")),
    )


@router.get("/alerts", response_class=HTMLResponse)
def alerts(
    request: Request,
    user: Viewer,
    services: ServicesDep,
    state: Annotated[str, Query(pattern="^(pending|firing|resolved)?$")] = "",
) -> HTMLResponse:
    return _page(request, user, services, state)


@router.post("/silences", response_class=HTMLResponse)
def create_silence(
    request: Request, user: Operator, form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's silence POST (``apply_silence_create``) from "alertname=X, pool=y" and a duration in minutes."""
    try:
        minutes = field(form, "duration_minutes") or "60"
        body = SilenceIn.model_validate(
            {
                "matchers": parse_matchers(field(form, "matchers")),
                "duration_seconds": float(minutes) * 60 if minutes.replace(".", "", 1).isdigit() else minutes,
                "comment": field(form, "comment"),
            }
        )
        apply_silence_create(audit, body, now=services.clock())
    except ValidationError as exc:
        return _page(request, user, services, error=validation_problem(exc)[1], form=form)
    except ValueError as exc:  # a matcher parse_matchers cannot read
        return _page(request, user, services, error=str(exc), form=form)
    except ApiError as exc:
        return _page(request, user, services, error=exc.message, form=form)
    return RedirectResponse("/alerts?done=silenced", status_code=303)


@router.post("/silences/{silence_id}/expire", response_class=HTMLResponse)
def expire_silence(
    silence_id: str, request: Request, user: Operator, _form: CsrfForm, services: ServicesDep, audit: AuditorDep
) -> Response:
    """The API's silence DELETE (``apply_silence_expire``)."""
    try:
        apply_silence_expire(audit, silence_id, now=services.clock())
    except ApiError as exc:
        return _page(request, user, services, error=exc.message)
    return RedirectResponse("/alerts?done=expired", status_code=303)
