"""Stored alert rules: create, edit (compare-and-set on ``version``), delete, and the default pack seeded once.

The pack is seeded in the transaction that claims its marker row in ``job_state``: several servers starting at once,
or one restarting, never seed it twice, and a shipped rule an operator deleted stays deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine, RowMapping, delete, insert, select, update

from alerting.defaults import DEFAULT_RULES, PACK_VERSION
from alerting.rules import SPEC_FIELDS, Rule, RuleSpec, spec_columns
from alerting.tables import alert_rules
from collector.database import insert_for
from collector.tables import job_state
from fleet.versions import VersionConflict

PACK_MARKER = "alerting_default_rules"


class RuleNotFound(LookupError):
    pass


def _rule(row: RowMapping) -> Rule:
    spec = RuleSpec(**{k: v for k, v in row["spec"].items() if k in SPEC_FIELDS})
    return Rule(row["id"], spec, row["version"], row["created_at"], row["updated_at"], row["builtin"])


def _columns(spec: RuleSpec) -> dict[str, Any]:
    return {"name": spec.name, "kind": spec.kind.value, "enabled": spec.enabled, "spec": spec_columns(spec)}


class RuleStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def list(self, *, enabled_only: bool = False) -> list[Rule]:
        query = select(alert_rules).order_by(alert_rules.c.id)
        if enabled_only:
            query = query.where(alert_rules.c.enabled.is_(True))
        with self.engine.connect() as conn:
            return [_rule(r._mapping) for r in conn.execute(query)]

    def get(self, rule_id: int) -> Rule | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(alert_rules).where(alert_rules.c.id == rule_id)).first()
        return None if row is None else _rule(row._mapping)

    def create(self, spec: RuleSpec, *, now: float, builtin: str | None = None) -> Rule:
        values = {**_columns(spec), "builtin": builtin, "version": 1, "created_at": now, "updated_at": now}
        with self.engine.begin() as conn:
            key = conn.execute(insert(alert_rules).values(**values)).inserted_primary_key
        assert key is not None
        return Rule(int(key[0]), spec, 1, now, now, builtin)

    def update(
        self, rule_id: int, changes: Mapping[str, Any], *, now: float, expected_version: int | None = None
    ) -> Rule:
        """Apply ``changes`` (spec fields, validated with the rest of the rule) atomically."""
        unknown = set(changes) - set(SPEC_FIELDS)
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]}: not a rule field")
        with self.engine.begin() as conn:
            row = conn.execute(select(alert_rules).where(alert_rules.c.id == rule_id).with_for_update()).first()
            if row is None:
                raise RuleNotFound(f"no alert rule {rule_id}")
            rule = _rule(row._mapping)
            if expected_version is not None and expected_version != rule.version:
                raise VersionConflict("rule", rule_id, expected_version, rule.version)
            spec = RuleSpec(**{**spec_columns(rule.spec), **changes})
            done = conn.execute(
                update(alert_rules)
                .where(alert_rules.c.id == rule_id, alert_rules.c.version == rule.version)
                .values(**_columns(spec), version=rule.version + 1, updated_at=now)
            )
            if done.rowcount != 1:
                raise VersionConflict("rule", rule_id, rule.version, rule.version + 1)
        return replace(rule, spec=spec, version=rule.version + 1, updated_at=now)

    def delete(self, rule_id: int) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(delete(alert_rules).where(alert_rules.c.id == rule_id)).rowcount == 1

    def seed_defaults(self, *, now: float) -> int:
        """Insert the default pack unless it was seeded before; the number of rules inserted (0 after the first)."""
        with self.engine.begin() as conn:
            claimed = conn.execute(
                insert_for(self.engine, job_state)
                .values(name=PACK_MARKER, watermark=float(PACK_VERSION))
                .on_conflict_do_nothing(index_elements=["name"])
                .returning(job_state.c.name)
            ).first()
            if claimed is None:
                return 0
            for key, spec in DEFAULT_RULES:
                values = {**_columns(spec), "builtin": key, "version": 1, "created_at": now, "updated_at": now}
                conn.execute(insert(alert_rules).values(**values))
        return len(DEFAULT_RULES)
