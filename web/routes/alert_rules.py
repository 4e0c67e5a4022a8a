"""``/api/v1/alert-rules``: viewers read the rules; operators create, edit (compare-and-set on ``version``) and delete
them, as they tune quotas: what alerts is day-to-day operations, while where alerts go (webhooks) is an admin's.

A rule that cannot hold is refused with 422 naming the field, and nothing is stored. A GET answers the rule's
``ETag``; an edit or delete with ``If-Match`` goes ahead only while the rule is still at that version (else 412).
Every change is audited (``web.audit``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response, status
from pydantic import BaseModel, Field

from alerting.rule_store import RuleStore
from alerting.rules import (
    Aggregate,
    EventKind,
    GroupBy,
    Op,
    Rule,
    RuleKind,
    RuleSpec,
    Severity,
    SubjectKind,
    spec_columns,
)
from collector.aggregate import Stat
from web.audit import AuditorDep
from web.auth import OperatorToken, ServicesDep, ViewerToken
from web.errors import ERROR_RESPONSES, error_responses, not_found, refused
from web.etags import IfMatch, require_match, tag

router = APIRouter(tags=["alerting"], responses=ERROR_RESPONSES)


def _store(services: ServicesDep) -> RuleStore:
    return RuleStore(services.engine)


StoreDep = Annotated[RuleStore, Depends(_store)]
RuleId = Annotated[int, Path(ge=1, le=2**62, description="the rule's id")]


class RuleFields(BaseModel):
    """Every rule field but name and kind; which ones a kind needs is in ``alerting.rules``."""

    model_config = {"allow_inf_nan": False}  # JSON numbers only: Infinity/NaN would not survive the answer

    severity: Severity = Severity.WARNING
    for_seconds: float = Field(0.0, ge=0, description="how long the condition must hold before the alert fires")
    metric: str | None = Field(None, description="a catalog metric, an agent extra, or request_error_ratio")
    op: Op | None = None
    threshold: float | None = None
    group_by: GroupBy = GroupBy.SERIES
    aggregate: Aggregate | None = Field(None, description="with group_by pool or fleet")
    stat: Stat | None = Field(None, description="threshold over this statistic of the window's 1-minute rollups")
    window_seconds: float | None = Field(None, gt=0)
    pool: str | None = Field(None, description="only this pool's series and the nodes running it")
    probability: float | None = Field(None, gt=0, le=1, description="predictive: saturation probability at least")
    horizon_seconds: float | None = Field(None, gt=0, description="predictive: saturation within this long")
    subject_kind: SubjectKind = SubjectKind.POOL
    silent_seconds: float | None = Field(None, gt=0, description="absent: a node silent this long")
    event: EventKind | None = None
    repeat_interval_seconds: float = Field(4 * 3600.0, gt=0)
    keep_firing_seconds: float = Field(
        0.0, ge=0, description="a firing alert stays firing this long after its condition stops holding"
    )
    slo_ratio: float | None = Field(
        None, gt=0, description="request_latency_p99_seconds only: the threshold is this share of each pool's SLO"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict, description="summary, action: what to do")
    enabled: bool = True


class RuleIn(RuleFields):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "name": "GPU memory nearly full",
                    "kind": "threshold",
                    "metric": "gpu_memory_used_bytes",
                    "op": ">",
                    "threshold": 75e9,
                    "for_seconds": 60,
                    "severity": "warning",
                    "annotations": {"summary": "GPU memory above 75 GB", "action": "move a replica"},
                }
            ]
        }
    }

    name: str = Field(min_length=1, max_length=200)
    kind: RuleKind


class RulePatch(BaseModel):
    """Any rule fields to change; the rest stay. ``version``: the version this edit is based on (409 if moved on)."""

    model_config = {
        "extra": "forbid",
        "allow_inf_nan": False,
        "json_schema_extra": {"examples": [{"threshold": 80e9, "for_seconds": 120, "enabled": True}]},
    }

    name: str | None = Field(None, min_length=1, max_length=200)
    severity: Severity | None = None
    for_seconds: float | None = Field(None, ge=0)
    metric: str | None = None
    op: Op | None = None
    threshold: float | None = None
    group_by: GroupBy | None = None
    aggregate: Aggregate | None = None
    stat: Stat | None = None
    window_seconds: float | None = Field(None, gt=0)
    pool: str | None = None
    probability: float | None = Field(None, gt=0, le=1)
    horizon_seconds: float | None = Field(None, gt=0)
    subject_kind: SubjectKind | None = None
    silent_seconds: float | None = Field(None, gt=0)
    event: EventKind | None = None
    repeat_interval_seconds: float | None = Field(None, gt=0)
    keep_firing_seconds: float | None = Field(None, ge=0)
    slo_ratio: float | None = Field(None, gt=0)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    enabled: bool | None = None
    version: int | None = None


class RuleOut(RuleIn):
    id: int
    version: int
    builtin: str | None = Field(None, description="the default pack's key of a shipped rule")
    created_at: float
    updated_at: float


class RulePage(BaseModel):
    items: list[RuleOut]
    next: str | None = None


def _out(rule: Rule) -> RuleOut:
    return RuleOut(
        **spec_columns(rule.spec),
        id=rule.id,
        version=rule.version,
        builtin=rule.builtin,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
    )


def _found(store: RuleStore, rule_id: int) -> Rule:
    rule = store.get(rule_id)
    if rule is None:
        raise not_found(f"no alert rule {rule_id}")
    return rule


def _answer(rule: Rule, response: Response) -> RuleOut:
    tag(response, rule.version)
    return _out(rule)


def _audited(rule: Rule) -> dict[str, Any]:
    return _out(rule).model_dump(mode="json")


@router.get("/alert-rules")
def list_rules(store: StoreDep, _token: ViewerToken) -> RulePage:
    return RulePage(items=[_out(r) for r in store.list()])


@router.get("/alert-rules/{rule_id}", responses=error_responses(404))
def get_rule(rule_id: RuleId, store: StoreDep, _token: ViewerToken, response: Response) -> RuleOut:
    return _answer(_found(store, rule_id), response)


@router.post("/alert-rules", status_code=status.HTTP_201_CREATED)
def create_rule(
    body: RuleIn, services: ServicesDep, _token: OperatorToken, audit: AuditorDep, response: Response
) -> RuleOut:
    try:
        spec = RuleSpec(**body.model_dump())
        with audit.change("alert_rule", "create") as change:
            rule = RuleStore(change.engine).create(spec, now=services.clock())
            change.resource_id, change.after = str(rule.id), _audited(rule)
    except ValueError as exc:
        raise refused(exc) from None
    return _answer(rule, response)


@router.patch("/alert-rules/{rule_id}", responses=error_responses(404, 409, 412))
def patch_rule(
    rule_id: RuleId,
    body: RulePatch,
    services: ServicesDep,
    _token: OperatorToken,
    audit: AuditorDep,
    if_match: IfMatch,
    response: Response,
) -> RuleOut:
    changes: dict[str, Any] = body.model_dump(exclude_unset=True)
    version = changes.pop("version", None)
    try:
        with audit.change("alert_rule", "update", str(rule_id)) as change:
            store = RuleStore(change.engine)
            before = _found(store, rule_id)
            require_match(if_match, before.version, f"alert rule {rule_id}")
            rule = store.update(rule_id, changes, now=services.clock(), expected_version=version)
            change.before, change.after = _audited(before), _audited(rule)
    except ValueError as exc:
        raise refused(exc) from None
    return _answer(rule, response)


@router.delete("/alert-rules/{rule_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404, 412))
def delete_rule(rule_id: RuleId, _token: OperatorToken, audit: AuditorDep, if_match: IfMatch) -> Response:
    """Its firing alerts resolve (and are notified) at the next evaluation."""
    with audit.change("alert_rule", "delete", str(rule_id)) as change:
        store = RuleStore(change.engine)
        before = _found(store, rule_id)
        require_match(if_match, before.version, f"alert rule {rule_id}")
        store.delete(rule_id)
        change.before = _audited(before)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
