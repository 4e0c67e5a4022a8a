"""forecast accuracy

Live forecast accuracy (issue 21): ``forecast_scores``, each pool forecast kept until its targets arrive, then its
score (``predictor/accuracy_store.py``), and ``forecasts.accuracy``, each pool's windows of accuracy.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("forecasts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("accuracy", sa.JSON(), nullable=True))
    op.create_table(
        "forecast_scores",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=260), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("origin_ts", sa.Double(), nullable=False),
        sa.Column("points", sa.JSON(), nullable=True),
        sa.Column("capacity", sa.Double(), nullable=True),
        sa.Column("probability", sa.Double(), nullable=True),
        sa.Column("scored", sa.Boolean(), nullable=False),
        sa.Column("points_scored", sa.Integer(), nullable=True),
        sa.Column("abs_error", sa.Double(), nullable=True),
        sa.Column("naive_error", sa.Double(), nullable=True),
        sa.Column("covered", sa.Integer(), nullable=True),
        sa.Column("warned", sa.Boolean(), nullable=True),
        sa.Column("saturated", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("kind", "subject", "metric", "origin_ts", name=op.f("pk_forecast_scores")),
    )
    op.create_index("ix_forecast_scores_due", "forecast_scores", ["kind", "subject", "metric", "scored"])


def downgrade() -> None:
    op.drop_table("forecast_scores")
    with op.batch_alter_table("forecasts", schema=None) as batch_op:
        batch_op.drop_column("accuracy")
