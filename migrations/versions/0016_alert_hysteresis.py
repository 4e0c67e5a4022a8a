"""alert hysteresis

A firing alert may stay firing for a rule's ``keep_firing_seconds`` after its condition stops holding (issue 22):
``alerts.last_held_at``, the last evaluation at which the condition held (null on existing alerts: their last
verdict's time stands in). The rule's new fields (``keep_firing_seconds``, ``slo_ratio``) live in its ``spec`` JSON.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 07:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_held_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_column("last_held_at")
