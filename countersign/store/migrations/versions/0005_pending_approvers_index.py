"""On PostgreSQL, a partial GIN index on the approvers of pending requests (`Store.pending_for`).

`jsonb_path_ops` indexes only what `@>` (containment) needs, so it is smaller than the default
`jsonb_ops`; `WHERE status = 'pending'` keeps decided requests out of it, so its size follows the
number of pending requests, not the history. SQLite gets no index: it scans (one machine).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

INDEX = "ix_approval_requests_pending_approvers"


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.create_index(
        INDEX,
        "approval_requests",
        ["approvers"],
        postgresql_using="gin",
        postgresql_ops={"approvers": "jsonb_path_ops"},
        postgresql_where=sa.text("status = 'pending'"),
    )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.drop_index(INDEX, table_name="approval_requests")
