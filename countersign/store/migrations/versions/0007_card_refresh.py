"""When a decided request's card must be rewritten again: `card_refresh_due_at`, set when Slack would
not rewrite it (429, 5xx, a timeout) and cleared once the card tells the truth, with a partial index
for the sweep that retries it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

INDEX = "ix_approval_requests_card_refresh_due"
PREDICATE = "card_refresh_due_at IS NOT NULL"


def upgrade() -> None:
    op.add_column("approval_requests", sa.Column("card_refresh_due_at", UTCDateTime()))
    op.create_index(
        INDEX,
        "approval_requests",
        ["card_refresh_due_at"],
        postgresql_where=sa.text(PREDICATE),
        sqlite_where=sa.text(PREDICATE),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="approval_requests")
    op.drop_column("approval_requests", "card_refresh_due_at")
