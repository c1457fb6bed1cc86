"""The approvers of the levels a request escalated from (`approval_requests.earlier_approvers`, a JSON
list of Slack user ids, user groups resolved), kept when it escalates (`Store.escalate`), so that an
approver of an earlier level through a user group is refused as one (`earlier_level`), as one named
by the level's `users` is, without asking Slack on the row a decision locks. A row from before this
revision keeps `[]`: its earlier levels' `users` still count (`review.was_approver`).

Revision ID: 0017_earlier_approvers
Revises: 0016_idempotency_per_requester
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType

revision = "0017_earlier_approvers"
down_revision = "0016_idempotency_per_requester"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("approval_requests") as table:
        table.add_column(sa.Column("earlier_approvers", JSONType, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("approval_requests") as table:
        table.drop_column("earlier_approvers")
