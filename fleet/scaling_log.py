"""The scaling log: the table of every scaling event and the outcome each had at the actuator.

The autoscaler writes it (``autoscaler.scaling_events``: the event, its reason codes, the store); alerting's
failed-actuation rule and the dashboard read it. Here, below all three, so neither reader reaches up into the
autoscaler for a table.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import JSON, BigInteger, Column, Double, Index, Integer, String, Table

from collector.tables import metadata


class Outcome(StrEnum):
    """What became of a decision at the actuator: the event's ``outcome`` and the scaling-events metric's label."""

    APPLIED = "applied"  # the actuator applied it (``act``)
    DRY_RUN = "dry_run"  # decided and recorded, not applied
    EXTERNAL = "external"  # an HPA or KEDA ScaledObject scales the target: decided and recorded, not patched
    FAILED = "failed"  # the actuator could not apply it, or a node refused it (the note says why)


scaling_events = Table(
    "scaling_events",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("pool", String(128), nullable=False),
    Column("ts", Double, nullable=False),
    Column("from_replicas", Integer, nullable=False),
    Column("to_replicas", Integer, nullable=False),
    Column("policy", String(32), nullable=False),
    Column("reason", String(2000), nullable=False),
    Column("reason_code", String(32), nullable=True),  # one of ReasonCode; null on events recorded before codes
    Column("inputs", JSON, nullable=False),
    Column("outcome", String(16), nullable=False),  # one of Outcome
    Column("actuator", String(32), nullable=False),
    Column("note", String(1000), nullable=True),
    Index(None, "pool", "id"),
)
