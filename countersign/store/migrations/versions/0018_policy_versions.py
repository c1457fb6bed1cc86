"""The policy versions the router took, in the order it took them (`policy_versions`): each one's
`version:`, SHA-256 and action classes, so that a router starting on a file can compare it with the
last version in force before it (`store/policies.py`, `router/reload.against_history`).

Revision ID: 0018_policy_versions
Revises: 0017_earlier_approvers
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType, UTCDateTime, utcnow

revision = "0018_policy_versions"
down_revision = "0017_earlier_approvers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policy_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("actions", JSONType, nullable=False),
        sa.Column("taken_at", UTCDateTime(), nullable=False, server_default=utcnow()),
    )


def downgrade() -> None:
    op.drop_table("policy_versions")
