"""``GET /alerts``: pending, firing and resolved alerts (silenced ones marked), silences (operators create and
expire them, through the REST API's own functions and so audited as it audits them) and every webhook with its
delivery log. Reads the alerting room's stores, as its API does.

Alerts are shown one row per rule, pool and status (:func:`alert_groups`: "GpuTemperatureHigh · chat · 3 nodes",
expanding to each node's value), firing before pending before resolved and critical before warning before info,
values in their metric's unit, and without the internal labels (:func:`alerting.payload.visible_labels`, as the
notifications)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from alerting.alert_store import AlertStore, SilenceStore
from alerting.lifecycle import Alert, AlertStatus
from alerting.outbox import delivery_log
from alerting.payload import visible_labels
from alerting.rule_store import RuleStore
from alerting.rules import Op, RuleKind, RuleSpec
from alerting.silences import Silence, silenced
from alerting.webhooks import WebhookStore
from web.auth import ServicesDep
from web.changes.audit import AuditorDep
from web.changes.silences import apply_silence_create, apply_silence_expire
from web.dashboard import units
from web.dashboard.deps import CsrfForm, DashboardUser, Operator, Viewer, field, validation_problem
from web.dashboard.render import page
from web.dashboard.security import DashboardRoute
from web.dashboard.tiles import concerned_nodes
from web.errors import ApiError
from web.schemas.alerts import SilenceIn
from web.services import AppServices
from wire.catalog import BY_NAME
from wire.errors import FieldError

router = APIRouter(route_class=DashboardRoute)
DELIVERIES_SHOWN = 10
NODE_ALERTS_READ = 2000  # the newest alerts searched for those of one node
# "alertname=HighTemp", "pool!=chat", "node=~gpu-.*": one matcher per comma-separated part
MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
DONE = {"silenced": "Silence created.", "expired": "Silence expired."}
STATUS_ORDER = {AlertStatus.FIRING: 0, AlertStatus.PENDING: 1, AlertStatus.RESOLVED: 2}
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
SHOWN_ELSEWHERE = frozenset({"alertname", "severity", "pool"})  # in the row's title


@dataclass(frozen=True)
class Member:
    alert: Alert
    silenced: bool
    value: str  # in the rule's metric's unit
    scope: dict[str, str]  # the labels that tell the members apart (node, gpu, tenant, ...)


@dataclass(frozen=True)
class AlertGroup:
    """One rule's alerts of one pool and status: one row, expanding to its members."""

    alertname: str
    severity: str
    status: AlertStatus
    pool: str
    summary: str
    members: tuple[Member, ...]

    @property
    def silenced(self) -> bool:
        return all(m.silenced for m in self.members)

    @property
    def since(self) -> float:
        return min(m.alert.fired_at or m.alert.active_since for m in self.members)

    @property
    def resolved_at(self) -> float | None:
        ends = [m.alert.resolved_at for m in self.members if m.alert.resolved_at is not None]
        return max(ends) if ends else None

    @property
    def count_words(self) -> str:
        """ "3 nodes", "2 GPUs", "4 series": what tells a group's members apart (a group of one shows its labels)."""
        kinds = {"GPUs" if "gpu" in m.scope else "nodes" if "node" in m.scope else "series" for m in self.members}
        return f"{len(self.members)} {kinds.pop() if len(kinds) == 1 else 'series'}"

    @property
    def matchers(self) -> str:
        """What the group's silence matches: its rule's name, and its pool (or its one member's scope)."""
        parts = {"alertname": self.alertname}
        if self.pool:
            parts["pool"] = self.pool
        elif len(self.members) == 1:
            parts |= self.members[0].scope
        return ", ".join(f"{k}={v}" for k, v in parts.items())


def _value_text(spec: RuleSpec | None, value: float | None) -> str:
    """An alert's value in its rule's unit: the metric's, a predictive rule's saturation probability as a %."""
    if spec is not None and spec.kind is RuleKind.PREDICTIVE:
        return units.by_unit("ratio", value)
    metric = spec.metric if spec is not None else None
    return units.metric_value(metric, value) if metric in BY_NAME else units.by_unit("", value)


def alert_groups(
    alerts: Sequence[Alert], active: Sequence[Silence], rules: Mapping[int, RuleSpec], now: float
) -> list[AlertGroup]:
    """``alerts`` grouped by rule, pool and status, the most urgent first (firing critical on top), each group's
    members the worst first (the largest value, the smallest for a ``<`` rule); ``rules`` gives each rule's metric,
    for the values' unit, and its comparison."""
    groups: dict[tuple[int, str, AlertStatus], list[Member]] = {}
    for a in alerts:
        quiet = a.status is not AlertStatus.RESOLVED and silenced(a.labels, active, now)
        spec = rules.get(a.rule_id)
        value = _value_text(spec, a.value)
        scope = {k: v for k, v in sorted(visible_labels(a.labels).items()) if k not in SHOWN_ELSEWHERE}
        groups.setdefault((a.rule_id, a.labels.get("pool", ""), a.status), []).append(Member(a, quiet, value, scope))
    out = []
    for (rule_id, pool, status), members in groups.items():
        first = members[0].alert
        spec = rules.get(rule_id)
        low_is_bad = spec is not None and spec.op in (Op.LT, Op.LE)
        members.sort(key=lambda m: _worst_first(m.alert.value, low_is_bad))
        out.append(
            AlertGroup(
                first.labels.get("alertname", "?"),
                first.labels.get("severity", ""),
                status,
                pool,
                first.annotations.get("summary", ""),
                tuple(members),
            )
        )
    out.sort(key=lambda g: (STATUS_ORDER[g.status], SEVERITY_ORDER.get(g.severity, 3), -g.since))
    return out


def _worst_first(value: float | None, low_is_bad: bool) -> float:
    if value is None:
        return float("inf")  # no value: last
    return value if low_is_bad else -value


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
    node: str = "",
    error: str = "",
    form: FormData | None = None,
) -> HTMLResponse:
    now = services.clock()
    silences = SilenceStore(services.engine)
    active = silences.list(active_at=now)
    if node:  # the alerts the fleet page marks the node with: naming it, or a pool it serves
        serves = services.fleet.pools_of(node)
        found = AlertStore(services.engine).list(status=state or None, limit=NODE_ALERTS_READ)
        shown = [a for a in found if concerned_nodes(a.labels, {node: serves})][:100]
    else:
        shown = AlertStore(services.engine).list(status=state or None, limit=100)
    rules = {rule.id: rule.spec for rule in RuleStore(services.engine).list()}
    hooks = WebhookStore(services.engine).list()
    return page(
        request,
        "alerts.html",
        user,
        status_code=422 if error else 200,
        groups=alert_groups(shown, active, rules, now),
        state=state,
        node=node,
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
    node: Annotated[str, Query(max_length=128, description="only the alerts concerning this node")] = "",
) -> HTMLResponse:
    return _page(request, user, services, state, node=node)


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
