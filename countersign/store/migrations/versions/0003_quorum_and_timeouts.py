"""Quorum votes, review reason, expiry and escalation levels, reminders.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import UTCDateTime, utcnow

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = (
    "review_reason",
    "required_approvals",
    "expires_at",
    "level",
    "level_started_at",
    "reminders_sent",
    "timeout_result",
    "next_reminder_at",
)


def upgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("review_reason", sa.Text()))
        batch.add_column(sa.Column("required_approvals", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("expires_at", UTCDateTime()))
        batch.add_column(sa.Column("level", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("level_started_at", UTCDateTime()))
        batch.add_column(sa.Column("reminders_sent", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("timeout_result", sa.String(8)))
        batch.add_column(sa.Column("next_reminder_at", UTCDateTime()))
        batch.create_index("ix_approval_requests_pending_expiry", ["status", "expires_at"])
    op.create_table(
        "votes",
        sa.Column("request_id", sa.String(26), sa.ForeignKey("approval_requests.id"), primary_key=True),
        sa.Column("slack_user_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("vote", sa.String(16), nullable=False),
        sa.Column("at", UTCDateTime(), server_default=utcnow(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("votes")
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_index("ix_approval_requests_pending_expiry")
        for column in COLUMNS:
            batch.drop_column(column)
