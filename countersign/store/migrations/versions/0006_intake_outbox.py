"""The intake outbox: intake messages an agent was given a request id for, until intake takes them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType, UTCDateTime, utcnow

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "intake_outbox",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("message", JSONType, nullable=False),
        sa.Column("accepted_at", UTCDateTime(), server_default=utcnow(), nullable=False),
    )
    op.create_index("ix_intake_outbox_accepted_at", "intake_outbox", ["accepted_at"])


def downgrade() -> None:
    op.drop_index("ix_intake_outbox_accepted_at", table_name="intake_outbox")
    op.drop_table("intake_outbox")
