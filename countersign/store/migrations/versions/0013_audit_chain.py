"""The audit chain (`audit_seals`): one row per sealed audit event, in the chain's order (`seq`),
with the event's content hash, the previous link's hash and its own (`store/chain.py`).

Revision ID: 0013_audit_chain
Revises: 0012_api_tokens
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import UTCDateTime, utcnow

revision = "0013_audit_chain"
down_revision = "0012_api_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_seals",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.Integer(), nullable=False, unique=True),
        sa.Column("event_sha256", sa.String(64), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("sealed_at", UTCDateTime(), nullable=False, server_default=utcnow()),
    )


def downgrade() -> None:
    op.drop_table("audit_seals")
