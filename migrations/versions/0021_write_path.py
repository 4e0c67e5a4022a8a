"""the write path (issue 38): the minutes each server process holds rollups of, and when each latest value was written

Issue 38: each process keeps a minute's rollup aggregates as it writes the rows and flushes them once the minute is
closed; ``rollup_pending`` names the minutes a process holds (written in the transaction of the rows that opened
them, deleted in the one that flushes them), so a minute a dead process never flushed is rolled again from the raw
samples by the rollup job, and the job's watermark stops before the oldest minute still held.
``series_latest.updated_at`` is the server's clock when a series' latest values were last written: the alert
evaluator reads only the series written since its last tick (a full read each minute besides).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 21:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rollup_pending",
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("bucket", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("holder", "bucket", name=op.f("pk_rollup_pending")),
    )
    with op.batch_alter_table("series_latest") as batch:
        batch.add_column(sa.Column("updated_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("series_latest") as batch:
        batch.drop_column("updated_at")
    op.drop_table("rollup_pending")
