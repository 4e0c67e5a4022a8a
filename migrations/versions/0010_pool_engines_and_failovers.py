"""pool engines and failovers

What a pool runs and where (issue 17): its engine (built-in text/classify or a declared profile), model, GPU memory
per replica and node selector; existing pools get no engine (null: built-in, each node keeps the kind it runs them
as, so a pool a node runs as classify through its --pools is not switched to text) and no selector. And the failovers the
local actuator records: a node that went down holding a pool's replicas, and when they were ready again elsewhere.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("engine", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("model", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("gpu_memory_mib", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("node_selector", sa.JSON(), nullable=True))
    op.create_table(
        "failovers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("detected_at", sa.Double(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("ready_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_failovers")),
    )
    with op.batch_alter_table("failovers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_failovers_detected_at"), ["detected_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("failovers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_failovers_detected_at"))
    op.drop_table("failovers")
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.drop_column("node_selector")
        batch_op.drop_column("gpu_memory_mib")
        batch_op.drop_column("model")
        batch_op.drop_column("engine")
