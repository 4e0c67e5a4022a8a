"""remote_write token scope and node ownership

Issue 35: a remote_write token may be scoped to the nodes it may write (``api_tokens.node_scope``, a list of
node-name globs; null: any node), and each node remembers the remote_write token that registered it
(``nodes.remote_token_id``) so a token's nodes are counted against ``remote_write_max_nodes_per_token``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node_scope", sa.JSON(), nullable=True))
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("remote_token_id", sa.String(length=32), nullable=True))
    op.create_index("ix_nodes_remote_token_id", "nodes", ["remote_token_id"])


def downgrade() -> None:
    op.drop_index("ix_nodes_remote_token_id", table_name="nodes")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("remote_token_id")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("node_scope")
