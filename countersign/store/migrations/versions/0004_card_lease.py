"""A lease on posting a request's card, so that one request gets one card.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("card_lease_until", UTCDateTime()))
        batch.add_column(sa.Column("card_attempts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("card_attempts")
        batch.drop_column("card_lease_until")
