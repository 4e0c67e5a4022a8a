"""Stored alert rules: create, edit (compare-and-set on ``version``), delete, and the default pack seeded once.

The pack is seeded in the transaction that claims its marker row in ``job_state``: several servers starting at once,
or one restarting, never seed it twice, and a shipped rule an operator deleted stays deleted. A newer pack
(:data:`~alerting.defaults.PACK_VERSION` above the marker's) is applied once the same way, to what an operator left
alone: a shipped rule never edited (version 1) takes the new pack's spec or, gone from the pack, is removed; a rule
new in the pack is added; an edited or deleted one stays as the operator left it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, delete, insert, select, update

from alerting.defaults import ADDED_IN, DEFAULT_RULES, PACK_VERSION
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
        """Insert the default pack unless it was seeded before, or bring an older seeding up to this pack; the number
        of rules inserted or replaced (0 when the pack is current)."""
        with self.engine.begin() as conn:
            claimed = conn.execute(
                insert_for(self.engine, job_state)
                .values(name=PACK_MARKER, watermark=float(PACK_VERSION))
                .on_conflict_do_nothing(index_elements=["name"])
                .returning(job_state.c.name)
            ).first()
            if claimed is not None:
                for key, spec in DEFAULT_RULES:
                    conn.execute(insert(alert_rules).values(**_shipped(key, spec, now)))
                return len(DEFAULT_RULES)
            seeded = conn.execute(select(job_state.c.watermark).where(job_state.c.name == PACK_MARKER)).scalar_one()
            if seeded >= PACK_VERSION:
                return 0
            upgrade = conn.execute(  # claimed by the one server whose update finds the old version still there
                update(job_state)
                .where(job_state.c.name == PACK_MARKER, job_state.c.watermark == seeded)
                .values(watermark=float(PACK_VERSION))
            )
            if upgrade.rowcount != 1:
                return 0
            return _upgrade_pack(conn, int(seeded), now)


def _shipped(key: str, spec: RuleSpec, now: float) -> dict[str, Any]:
    return {**_columns(spec), "builtin": key, "version": 1, "created_at": now, "updated_at": now}


def _upgrade_pack(conn: Connection, seeded: int, now: float) -> int:
    """Bring the shipped rules nobody edited from pack ``seeded`` to this one (see the module's docstring); the
    rules changed."""
    query = select(alert_rules.c.builtin, alert_rules.c.version).where(alert_rules.c.builtin.isnot(None))
    shipped = {row.builtin: row.version for row in conn.execute(query)}
    pack = dict(DEFAULT_RULES)
    changed = 0
    for key, spec in pack.items():
        if key not in shipped:
            if ADDED_IN.get(key, 1) > seeded:  # new since that pack (absent otherwise: an operator deleted it)
                conn.execute(insert(alert_rules).values(**_shipped(key, spec, now)))
                changed += 1
        elif shipped[key] == 1:
            conn.execute(
                update(alert_rules).where(alert_rules.c.builtin == key).values(**_columns(spec), updated_at=now)
            )
            changed += 1
    for key, version in shipped.items():
        if key not in pack and version == 1:
            conn.execute(delete(alert_rules).where(alert_rules.c.builtin == key))
            changed += 1
    return changed
