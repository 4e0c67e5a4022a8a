"""forecast quantiles, auto's choice and the pool's attainment target

A forecast keeps the forecaster's own quantiles (issue 37): ``forecasts.quantiles`` ({"levels": [...], "values":
[[...], ...] per point}); ``forecasts.selection`` says which of ``auto``'s candidates a pool follows and how both
scored. A pool declares the attainment its predictive bound is sized for: ``pools.slo_attainment`` (null on pools made
before: 0.99).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 20:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("forecasts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("quantiles", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("selection", sa.JSON(), nullable=True))
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slo_attainment", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.drop_column("slo_attainment")
    with op.batch_alter_table("forecasts", schema=None) as batch_op:
        batch_op.drop_column("selection")
        batch_op.drop_column("quantiles")
