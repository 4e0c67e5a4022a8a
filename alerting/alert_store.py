"""Stored alerts and silences: the evaluator's state across restarts, history for the API, silences' matchers.

:meth:`AlertStore.commit` writes one evaluation — new and changed alerts, resolutions, dropped pending alerts and
the outbox rows of its notifications — in one transaction, so a notification is never recorded without the state
that caused it, nor the other way round.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine, RowMapping, bindparam, delete, insert, select, update

from alerting.lifecycle import Alert, AlertStatus
from alerting.silences import Matcher, Silence
from alerting.tables import alerts, notifications, silences
from wire.errors import FieldError


@dataclass(frozen=True)
class OutboxRow:
    """A notification to one target: the exact body, sent until a 2xx (``delivery_id`` stays on every retry).
    ``supersedes``: it replaces the target's undelivered notifications of the group (an Alertmanager's: each carries
    the group's whole state and its end, so only the newest has anything to say)."""

    webhook_id: str
    group_key: str
    body: str
    created_at: float
    delivery_id: str = ""
    supersedes: bool = False


def _alert(row: RowMapping) -> Alert:
    return Alert(
        rule_id=int(row["rule_id"]),
        fingerprint=row["fingerprint"],
        labels=row["labels"],
        annotations=row["annotations"],
        status=AlertStatus(row["status"]),
        value=row["value"],
        active_since=row["active_since"],
        last_seen_at=row["last_seen_at"],
        fired_at=row["fired_at"],
        resolved_at=row["resolved_at"],
        last_notified_at=row["last_notified_at"],
        id=int(row["id"]),
        last_held_at=row["last_held_at"],
    )


def _values(alert: Alert) -> dict[str, Any]:
    return {
        "rule_id": alert.rule_id,
        "fingerprint": alert.fingerprint,
        "pool": alert.labels.get("pool", ""),
        "status": alert.status.value,
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "value": alert.value,
        "active_since": alert.active_since,
        "last_seen_at": alert.last_seen_at,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
        "last_notified_at": alert.last_notified_at,
        "last_held_at": alert.last_held_at,
    }


# executed with many rows of ``{"alert_id", **_values(alert)}``: the SET columns come from the rows' other keys
_UPDATE_BY_ID = update(alerts).where(alerts.c.id == bindparam("alert_id"))


class AlertStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def active(self) -> dict[int, dict[str, Alert]]:
        """Pending and firing alerts by rule and fingerprint: where a new evaluator leader starts from."""
        query = select(alerts).where(alerts.c.status.in_([AlertStatus.PENDING.value, AlertStatus.FIRING.value]))
        state: dict[int, dict[str, Alert]] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(query.order_by(alerts.c.id)):
                alert = _alert(row._mapping)
                state.setdefault(alert.rule_id, {})[alert.fingerprint] = alert
        return state

    def commit(
        self, changed: Iterable[Alert], resolved: Iterable[Alert], dropped: Iterable[Alert], outbox: Sequence[OutboxRow]
    ) -> dict[str, int]:
        """Write one evaluation; answers the ids given to new alerts, by fingerprint and rule (``"rule:fp"``)."""
        ids: dict[str, int] = {}
        written = [*changed, *resolved]
        with self.engine.begin() as conn:
            known = [{"alert_id": a.id, **_values(a)} for a in written if a.id is not None]
            if known:  # one executemany: a fleet's worth of values moving each second is one statement, not 1,600
                conn.execute(_UPDATE_BY_ID, known)
            for alert in (a for a in written if a.id is None):
                key = conn.execute(insert(alerts).values(**_values(alert))).inserted_primary_key
                if key:
                    ids[f"{alert.rule_id}:{alert.fingerprint}"] = int(key[0])
            gone = [a.id for a in dropped if a.id is not None]
            if gone:
                conn.execute(delete(alerts).where(alerts.c.id.in_(gone)))
            replaced = sorted({(row.webhook_id, row.group_key[:500]) for row in outbox if row.supersedes})
            if replaced:
                conn.execute(_SUPERSEDE, [{"target": target, "key": key} for target, key in replaced])
            if outbox:
                conn.execute(insert(notifications), [_outbox_values(row) for row in outbox])
        return ids

    def list(
        self,
        *,
        status: str | None = None,
        rule_id: int | None = None,
        pool: str | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[Alert]:
        """Newest first; ``before`` is the id cursor of the previous page."""
        query = select(alerts).order_by(alerts.c.id.desc()).limit(limit)
        for column, value in ((alerts.c.status, status), (alerts.c.rule_id, rule_id), (alerts.c.pool, pool)):
            if value is not None:
                query = query.where(column == value)
        if before is not None:
            query = query.where(alerts.c.id < before)
        with self.engine.connect() as conn:
            return [_alert(r._mapping) for r in conn.execute(query)]


_SUPERSEDE = (
    update(notifications)
    .where(
        notifications.c.webhook_id == bindparam("target"),
        notifications.c.group_key == bindparam("key"),
        notifications.c.status == "pending",
    )
    .values(status="superseded")
)


def _outbox_values(row: OutboxRow) -> dict[str, Any]:
    return {
        "delivery_id": row.delivery_id or secrets.token_hex(16),
        "webhook_id": row.webhook_id,
        "group_key": row.group_key[:500],
        "body": row.body,
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": row.created_at,
        "created_at": row.created_at,
    }


def with_ids(state: dict[int, dict[str, Alert]], ids: dict[str, int]) -> None:
    """Give the state's new alerts the ids the database gave them."""
    for key, new_id in ids.items():
        rule, fp = key.split(":", 1)
        alert = state.get(int(rule), {}).get(fp)
        if alert is not None:
            state[int(rule)][fp] = replace(alert, id=new_id)


class SilenceStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self,
        matchers: Sequence[Matcher],
        *,
        starts_at: float,
        ends_at: float,
        created_by: str,
        comment: str,
        now: float,
    ) -> Silence:
        if not matchers:
            raise FieldError("matchers", "at least one matcher (a silence of everything is a mistake)")
        if not ends_at > starts_at:
            raise FieldError("ends_at", f"must be after starts_at ({starts_at}), got {ends_at}")
        silence = Silence(secrets.token_hex(8), tuple(matchers), starts_at, ends_at, created_by, comment[:1000], now)
        body = [{"name": m.name, "value": m.value, "op": m.op.value} for m in matchers]
        with self.engine.begin() as conn:
            conn.execute(
                insert(silences).values(
                    id=silence.id,
                    matchers=body,
                    starts_at=starts_at,
                    ends_at=ends_at,
                    created_by=created_by,
                    comment=silence.comment,
                    created_at=now,
                )
            )
        return silence

    def list(self, *, active_at: float | None = None) -> list[Silence]:
        """Every silence, newest first; with ``active_at`` only those not yet expired at that time."""
        query = select(silences).order_by(silences.c.created_at.desc(), silences.c.id)
        if active_at is not None:
            query = query.where(silences.c.ends_at > active_at)
        with self.engine.connect() as conn:
            return [_silence(r._mapping) for r in conn.execute(query)]

    def expire(self, silence_id: str, *, now: float) -> bool:
        """End a silence now (kept, as Alertmanager keeps expired silences); False when unknown."""
        with self.engine.begin() as conn:
            row = conn.execute(select(silences.c.ends_at).where(silences.c.id == silence_id)).first()
            if row is None:
                return False
            if row.ends_at > now:
                conn.execute(update(silences).where(silences.c.id == silence_id).values(ends_at=now))
        return True


def _silence(row: RowMapping) -> Silence:
    matchers = tuple(Matcher(m["name"], m["value"], m.get("op", "=")) for m in row["matchers"])
    return Silence(
        row["id"], matchers, row["starts_at"], row["ends_at"], row["created_by"], row["comment"], row["created_at"]
    )
