"""remote write and OTLP: the metric families no mapping source reads

Issue 39: an unmapped series vanished with a 204 (OTLP: an empty partial_success) and a counter; ``remote_unmapped``
keeps each family by protocol with its samples and when it was first and last seen, bounded (collector.remote.unmapped)
and forgotten when idle.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 20:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "remote_unmapped",
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("first_seen", sa.Double(), nullable=False),
        sa.Column("last_seen", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("source", "name"),
    )
    op.create_index("ix_remote_unmapped_last_seen", "remote_unmapped", ["last_seen"])


def downgrade() -> None:
    op.drop_index("ix_remote_unmapped_last_seen", table_name="remote_unmapped")
    op.drop_table("remote_unmapped")
