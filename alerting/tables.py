"""Alerting's tables: rules, alerts, silences, webhooks, the notification outbox and the delivery log."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Double, Index, Integer, String, Table, Text

from collector.tables import metadata


def _id() -> Column[int]:
    return Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)


alert_rules = Table(
    "alert_rules",
    metadata,
    _id(),
    Column("name", String(200), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("spec", JSON, nullable=False),  # every RuleSpec field (alerting.rules.spec_columns)
    Column("builtin", String(64), nullable=True, unique=True),  # the default pack's key of a shipped rule
    Column("version", Integer, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)

# Active alerts (pending, firing) and resolved ones kept as history; one active row per rule and fingerprint.
alerts = Table(
    "alerts",
    metadata,
    _id(),
    Column("rule_id", BigInteger, nullable=False),
    Column("fingerprint", String(16), nullable=False),
    Column("pool", String(128), nullable=False),  # '' for none: the API filters and groups by it
    Column("status", String(16), nullable=False),
    Column("labels", JSON, nullable=False),
    Column("annotations", JSON, nullable=False),
    Column("value", Double, nullable=True),
    Column("active_since", Double, nullable=False),
    Column("last_seen_at", Double, nullable=False),
    Column("fired_at", Double, nullable=True),
    Column("resolved_at", Double, nullable=True),
    Column("last_notified_at", Double, nullable=True),
    Column("last_held_at", Double, nullable=True),  # the last evaluation the condition held (keep_firing_seconds)
    Index(None, "status", "id"),
    Index(None, "rule_id", "fingerprint"),
)

silences = Table(
    "silences",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("matchers", JSON, nullable=False),  # [{"name", "value", "op"}]
    Column("starts_at", Double, nullable=False),
    Column("ends_at", Double, nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("comment", String(1000), nullable=False),
    Column("created_at", Double, nullable=False),
)

webhooks = Table(
    "webhooks",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("kind", String(16), nullable=False),  # webhook | alertmanager
    Column("url", String(2000), nullable=False),  # as given (it may hold credentials: never logged or answered)
    Column("secret", String(500), nullable=True),  # the HMAC key; needed in the clear to sign, never answered
    Column("created_at", Double, nullable=False),
)

# The outbox: one row per notification and target, written in the evaluation's transaction, sent at least once.
notifications = Table(
    "alert_notifications",
    metadata,
    _id(),
    Column("delivery_id", String(32), nullable=False, unique=True),  # X-Fleetpilot-Delivery, the same on retries
    Column("webhook_id", String(32), nullable=False),
    Column("group_key", String(500), nullable=False),
    Column("body", Text, nullable=False),  # the exact JSON sent and signed
    Column("status", String(16), nullable=False),  # pending | delivered | abandoned | dropped | superseded
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", Double, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("delivered_at", Double, nullable=True),
    Column("last_error", String(500), nullable=True),
    Index(None, "status", "next_attempt_at"),
)

deliveries = Table(
    "webhook_deliveries",
    metadata,
    _id(),
    Column("webhook_id", String(32), nullable=False),
    Column("notification_id", BigInteger, nullable=False),
    Column("delivery_id", String(32), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("ts", Double, nullable=False),
    Column("outcome", String(16), nullable=False),  # delivered | failed
    Column("status_code", Integer, nullable=True),
    Column("error", String(500), nullable=True),
    Column("duration_seconds", Double, nullable=False),
    Index(None, "webhook_id", "id"),
)
