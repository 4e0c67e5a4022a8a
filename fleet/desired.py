"""The desired-state board: what every node should run and enforce, computed when the control loops decide and
looked up by the ingest answer without a database read.

The table holds one snapshot per part (``pools`` from the autoscaler, ``tenants`` from the isolation enforcer),
each with a version that only grows; see :class:`DesiredBoard`.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Double, String, Table

from collector.tables import metadata

desired_snapshots = Table(
    "desired_snapshots",
    metadata,
    Column("part", String(32), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("generated_at", Double, nullable=False),
    Column("body", JSON, nullable=False),
)
