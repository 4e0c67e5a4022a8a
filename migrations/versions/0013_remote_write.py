"""remote write

Prometheus remote write and OTLP in (issue 20): ``nodes.source`` (``agent``, ``remote_write``, ``otlp``) and
``nodes.resolution_seconds`` (the interval between a scraped node's samples, null for an agent), and the
receiver's staging tables ``remote_series`` and ``remote_points`` (``collector/remote/tables.py``).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 03:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=16), server_default="agent", nullable=False))
        batch_op.add_column(sa.Column("resolution_seconds", sa.Double(), nullable=True))
    op.create_table(
        "remote_series",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("group_id", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("device", sa.Integer(), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.Double(), nullable=False),
        sa.Column("last_seen", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_remote_series")),
    )
    op.create_index(op.f("ix_remote_series_source"), "remote_series", ["source"])
    op.create_index(op.f("ix_remote_series_last_seen"), "remote_series", ["last_seen"])
    op.create_table(
        "remote_points",
        sa.Column("series_id", sa.BigInteger(), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("group_id", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "ts", name=op.f("pk_remote_points")),
    )
    op.create_index(op.f("ix_remote_points_group_id_remote_points_ts"), "remote_points", ["group_id", "ts"])
    op.create_index(op.f("ix_remote_points_ts"), "remote_points", ["ts"])


def downgrade() -> None:
    op.drop_table("remote_points")
    op.drop_table("remote_series")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("resolution_seconds")
        batch_op.drop_column("source")
