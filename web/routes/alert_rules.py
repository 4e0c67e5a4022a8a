"""``/api/v1/alert-rules``: viewers read the rules; operators create, edit (compare-and-set on ``version``) and delete
them, as they tune quotas: what alerts is day-to-day operations, while where alerts go (webhooks) is an admin's.

A rule that cannot hold is refused with 422 naming the field, and nothing is stored. A GET answers the rule's
``ETag``; an edit or delete with ``If-Match`` goes ahead only while the rule is still at that version (else 412).
Every change is audited (``web.changes.alert_rules``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response, status

from alerting.rule_store import RuleStore
from alerting.rules import Rule
from web.auth import OperatorToken, ServicesDep, ViewerToken
from web.changes.alert_rules import apply_rule_create, apply_rule_delete, apply_rule_patch
from web.changes.audit import AuditorDep, existing
from web.errors import ERROR_RESPONSES, error_responses
from web.etags import IfMatch, tag
from web.schemas.alert_rules import RuleIn, RuleOut, RulePage, RulePatch, rule_out

router = APIRouter(tags=["alerting"], responses=ERROR_RESPONSES)


def _store(services: ServicesDep) -> RuleStore:
    return RuleStore(services.engine)


StoreDep = Annotated[RuleStore, Depends(_store)]
RuleId = Annotated[int, Path(ge=1, le=2**62, description="the rule's id")]


def _answer(rule: Rule, response: Response) -> RuleOut:
    tag(response, rule.version)
    return rule_out(rule)


@router.get("/alert-rules")
def list_rules(store: StoreDep, _token: ViewerToken) -> RulePage:
    return RulePage(items=[rule_out(r) for r in store.list()])


@router.get("/alert-rules/{rule_id}", responses=error_responses(404))
def get_rule(rule_id: RuleId, store: StoreDep, _token: ViewerToken, response: Response) -> RuleOut:
    return _answer(existing(store.get(rule_id), f"alert rule {rule_id}"), response)


@router.post("/alert-rules", status_code=status.HTTP_201_CREATED)
def create_rule(
    body: RuleIn, services: ServicesDep, _token: OperatorToken, audit: AuditorDep, response: Response
) -> RuleOut:
    return _answer(apply_rule_create(audit, body, now=services.clock()), response)


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
    return _answer(apply_rule_patch(audit, rule_id, body, now=services.clock(), if_match=if_match), response)


@router.delete("/alert-rules/{rule_id}", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(404, 412))
def delete_rule(rule_id: RuleId, _token: OperatorToken, audit: AuditorDep, if_match: IfMatch) -> Response:
    """Its firing alerts resolve (and are notified) at the next evaluation."""
    apply_rule_delete(audit, rule_id, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
