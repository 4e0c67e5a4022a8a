"""pool scale targets

Where the kubernetes actuator finds a pool's replicas (issue 19): ``scale_target``, any object with a ``/scale``
subresource written ``apiVersion/kind/namespace/name`` (null on existing pools: the Deployment named after the pool
in ``kubernetes_namespace``, as before), and ``scaled_by``, the HPA or KEDA ScaledObject the controller found
scaling that object instead of it (null: nothing).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 22:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scale_target", sa.String(length=512), nullable=True))
        batch_op.add_column(sa.Column("scaled_by", sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools", schema=None) as batch_op:
        batch_op.drop_column("scaled_by")
        batch_op.drop_column("scale_target")
