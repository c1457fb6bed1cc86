"""A partial index on the audit events that record a reviewer's decision (`approved`, `rejected`,
`vote`) by actor: a reviewer's "Decided by you recently" (`Store.decided_by_user`, the App Home tab)
read it by scanning the whole trail.

Revision ID: 0014_decided_by_index
Revises: 0013_audit_chain
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import DECIDING

revision = "0014_decided_by_index"
down_revision = "0013_audit_chain"
branch_labels = None
depends_on = None


def upgrade() -> None:
    where = sa.text(DECIDING)
    op.create_index(
        "ix_audit_events_decided_by",
        "audit_events",
        ["actor", "request_id"],
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index("ix_audit_events_decided_by", table_name="audit_events")
