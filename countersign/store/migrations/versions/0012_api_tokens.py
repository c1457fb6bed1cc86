"""Per-agent API tokens of the HTTP API (`api_tokens`): the SHA-256 of each token's secret (unique:
how a token is found), the requester it acts as, its action classes, and when it was revoked.

Revision ID: 0012_api_tokens
Revises: 0011_webhook_resume
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType, UTCDateTime, utcnow

revision = "0012_api_tokens"
down_revision = "0011_webhook_resume"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("requester", sa.String(128), nullable=False),
        sa.Column("actions", JSONType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False, server_default=utcnow()),
        sa.Column("revoked_at", UTCDateTime()),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
