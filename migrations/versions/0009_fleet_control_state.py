"""fleet control state: node reports, replica history, desired snapshots, scaling reason codes

The typed control state of issue 16: each node's latest report and its replicas over time (collector), the
desired-state board's snapshots (fleet), the pools deleted while nodes still run them (autoscaler's local
actuator) and the reason code of each scaling event.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 12:51:41.933669
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "desired_snapshots",
        sa.Column("part", sa.String(length=32), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("generated_at", sa.Double(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("part", name=op.f("pk_desired_snapshots")),
    )
    op.create_table(
        "retired_pools",
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("retired_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("pool", name=op.f("pk_retired_pools")),
    )
    op.create_table(
        "node_reports",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("received_at", sa.Double(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_node_reports")),
    )
    op.create_table(
        "replica_reports",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("ready", sa.Integer(), nullable=False),
        sa.Column("starting", sa.Integer(), nullable=False),
        sa.Column("draining", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("node_id", "pool", "ts", name=op.f("pk_replica_reports")),
    )
    with op.batch_alter_table("replica_reports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_replica_reports_pool_replica_reports_ts"), ["pool", "ts"], unique=False)
        batch_op.create_index(batch_op.f("ix_replica_reports_ts"), ["ts"], unique=False)

    with op.batch_alter_table("scaling_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reason_code", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scaling_events", schema=None) as batch_op:
        batch_op.drop_column("reason_code")

    with op.batch_alter_table("replica_reports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_replica_reports_ts"))
        batch_op.drop_index(batch_op.f("ix_replica_reports_pool_replica_reports_ts"))

    op.drop_table("replica_reports")
    op.drop_table("node_reports")
    op.drop_table("retired_pools")
    op.drop_table("desired_snapshots")
