"""A partial index over pending requests by action class and requester, for the policy's intake
limit on pending requests (`limits.pending`): intake counts one requester's pending requests of one
class before it accepts another (`Store.pending_count`), which without it scans every pending
request of the class.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

INDEX = "ix_approval_requests_pending_requester"
PREDICATE = "status = 'pending'"


def upgrade() -> None:
    where = sa.text(PREDICATE)
    op.create_index(
        INDEX, "approval_requests", ["action", "requester"], postgresql_where=where, sqlite_where=where
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="approval_requests")
