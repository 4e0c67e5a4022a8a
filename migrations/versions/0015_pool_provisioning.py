"""pool provisioning

What the controller sizes a pool by besides its spec (issue 21): the predictive bound's band scale, adapted toward
the attainment target, and the startup measured from the pool's own scale-ups, as JSON (``fleet.pools.Provisioning``;
null until the controller has decided the pool), so the dashboard shows them and a new leader carries them on.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 06:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("provisioning", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.drop_column("provisioning")
