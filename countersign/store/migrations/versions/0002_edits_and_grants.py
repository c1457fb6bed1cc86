"""Edits, rules snapshot, grants and execution outcome on approval requests.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType, UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = (
    "rules",
    "approved_payload",
    "edits",
    "grant_expires_at",
    "execution",
    "execution_detail",
    "executed_at",
)


def upgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("rules", JSONType, nullable=False, server_default="{}"))
        batch.add_column(sa.Column("approved_payload", JSONType))
        batch.add_column(sa.Column("edits", JSONType))
        batch.add_column(sa.Column("grant_expires_at", UTCDateTime()))
        batch.add_column(sa.Column("execution", sa.String(16)))
        batch.add_column(sa.Column("execution_detail", sa.Text()))
        batch.add_column(sa.Column("executed_at", UTCDateTime()))


def downgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        for column in COLUMNS:
            batch.drop_column(column)
