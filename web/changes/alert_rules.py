"""Alert rule changes (operator): create, edit (compare-and-set on ``version``) and delete rules. A rule that cannot
hold is refused 422 naming the field, and nothing is stored; an edit or delete goes ahead only while the rule is at
the version ``If-Match`` names (else 412)."""

from __future__ import annotations

from typing import Any

from alerting.rule_store import RuleStore
from alerting.rules import Rule, RuleSpec
from web.changes.audit import Auditor, existing
from web.errors import refusals
from web.schemas.alert_rules import RuleIn, RulePatch, rule_out


def _audited(rule: Rule) -> dict[str, Any]:
    return rule_out(rule).model_dump(mode="json")


def apply_rule_create(audit: Auditor, body: RuleIn, *, now: float) -> Rule:
    """Create a rule, audited as ("alert_rule", "create")."""
    with refusals():
        spec = RuleSpec(**body.model_dump())
    with audit.change("alert_rule", "create") as change:
        rule = RuleStore(change.engine).create(spec, now=now)
        change.resource_id, change.after = str(rule.id), _audited(rule)
    return rule


def apply_rule_patch(
    audit: Auditor, rule_id: int, body: RulePatch, *, now: float, if_match: frozenset[int] | None = None
) -> Rule:
    """Change the fields ``body`` sets, audited as ("alert_rule", "update"); 409 when its ``version`` is stale."""
    changes: dict[str, Any] = body.model_dump(exclude_unset=True)
    version = changes.pop("version", None)
    with audit.change("alert_rule", "update", str(rule_id)) as change:
        store = RuleStore(change.engine)
        before = existing(store.get(rule_id), f"alert rule {rule_id}", if_match)
        rule = store.update(rule_id, changes, now=now, expected_version=version)
        change.before, change.after = _audited(before), _audited(rule)
    return rule


def apply_rule_delete(audit: Auditor, rule_id: int, *, if_match: frozenset[int] | None = None) -> None:
    """Delete a rule, audited as ("alert_rule", "delete"); its firing alerts resolve at the next evaluation."""
    with audit.change("alert_rule", "delete", str(rule_id)) as change:
        store = RuleStore(change.engine)
        before = existing(store.get(rule_id), f"alert rule {rule_id}", if_match)
        store.delete(rule_id)
        change.before = _audited(before)
