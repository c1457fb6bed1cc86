"""Why an agent has not run its resume job yet: `outbox.problem` (the job failed before the agent
recorded anything, or no worker took it), with a partial index for the sweep that clears it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import NullableJSON

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEX = "ix_outbox_problem"
PREDICATE = "problem IS NOT NULL"


def upgrade() -> None:
    op.add_column("outbox", sa.Column("problem", NullableJSON))
    op.create_index(
        INDEX,
        "outbox",
        ["id"],
        postgresql_where=sa.text(PREDICATE),
        sqlite_where=sa.text(PREDICATE),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="outbox")
    op.drop_column("outbox", "problem")
