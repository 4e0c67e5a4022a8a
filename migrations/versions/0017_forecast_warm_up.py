"""forecast warm-up

A forecast attempt that failed for too little history says so (issue 22): ``forecasts.short_history``. A subject
never forecast whose attempts fail only that way is warming up, and the ForecastFailing alert waits for it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("forecasts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("short_history", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("forecasts", schema=None) as batch_op:
        batch_op.drop_column("short_history")
