"""Fewer indexes for a decision to update: a request leaving `pending` (a vote, an expiry) is a
non-HOT update, so PostgreSQL adds the new row version to every index whose predicate it matches.

- `ix_approval_requests_status` and `ix_approval_requests_action` (migration 0001) are dropped: every
  query on `status` asks for pending requests, which the partial indexes answer, and the one on
  `action` (`Store.pending_count`) has `ix_approval_requests_pending_requester` (migration 0009).
- `ix_approval_requests_pending_expiry` (`status, expires_at`, migration 0003) becomes partial,
  `expires_at WHERE status = 'pending'`: the sweep's `due_for_timeout` reads only pending rows, and a
  decided row no longer gets an entry.

An expiry then writes 3 index entries a row instead of 6 (primary key, idempotency key, the card
rewrite's `ix_approval_requests_card_refresh_due`): BENCHMARKS.md, "Issue 14, second pass".

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLE = "approval_requests"
EXPIRY = "ix_approval_requests_pending_expiry"
PREDICATE = "status = 'pending'"


def upgrade() -> None:
    op.drop_index("ix_approval_requests_status", table_name=TABLE)
    op.drop_index("ix_approval_requests_action", table_name=TABLE)
    op.drop_index(EXPIRY, table_name=TABLE)
    where = sa.text(PREDICATE)
    op.create_index(EXPIRY, TABLE, ["expires_at"], postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    op.drop_index(EXPIRY, table_name=TABLE)
    op.create_index(EXPIRY, TABLE, ["status", "expires_at"])
    op.create_index("ix_approval_requests_action", TABLE, ["action"])
    op.create_index("ix_approval_requests_status", TABLE, ["status"])
