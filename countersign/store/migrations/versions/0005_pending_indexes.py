"""Partial indexes over pending requests: whose approvals are pending, and what the sweep must do.

- `ix_approval_requests_pending_approvers` (PostgreSQL only): a GIN index on `approvers` for
  `Store.pending_for` (`approvers @> '["U…"]'`). `jsonb_path_ops` indexes only what containment
  needs, so it is smaller than the default `jsonb_ops`. SQLite scans instead (one machine).
- `ix_approval_requests_cards_due` and `ix_approval_requests_reminders_due` (both backends): the
  sweep's `due_for_card` and `due_for_reminder`, which otherwise scan every pending request every
  second (BENCHMARKS.md, "The cost of a pause").

Each is partial (`WHERE status = 'pending' ...`), so its size follows what is pending now, not the
history of decided requests.

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

APPROVERS = "ix_approval_requests_pending_approvers"
SWEEP = {  # name: (column, predicate), as in models.ApprovalRequest
    "ix_approval_requests_cards_due": ("level_started_at", "status = 'pending' AND card_ts IS NULL"),
    "ix_approval_requests_reminders_due": (
        "next_reminder_at",
        "status = 'pending' AND next_reminder_at IS NOT NULL",
    ),
}


def upgrade() -> None:
    for name, (column, predicate) in SWEEP.items():
        where = sa.text(predicate)
        op.create_index(name, "approval_requests", [column], postgresql_where=where, sqlite_where=where)
    if op.get_context().dialect.name == "postgresql":
        op.create_index(
            APPROVERS,
            "approval_requests",
            ["approvers"],
            postgresql_using="gin",
            postgresql_ops={"approvers": "jsonb_path_ops"},
            postgresql_where=sa.text("status = 'pending'"),
        )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.drop_index(APPROVERS, table_name="approval_requests")
    for name in SWEEP:
        op.drop_index(name, table_name="approval_requests")
