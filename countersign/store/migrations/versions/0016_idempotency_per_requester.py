"""An idempotency key is its requester's: the unique constraint on `approval_requests.idempotency_key`
becomes one on (`requester`, `idempotency_key`), so two requesters that send the same key get two
requests, and neither can replay, learn or block the other's (`countersign.idempotency`, which
scopes its Redis claims the same way). Every existing row stays valid: keys unique alone are unique
per requester. `Store.create` finds the earlier request by both columns, which the new constraint's
index serves.

The old constraint is unnamed in the schema: PostgreSQL named it `approval_requests_idempotency_key_key`;
SQLite keeps it unnamed, and the batch's naming convention gives the reflected copy that same name,
so one drop serves both. A downgrade fails while two requesters share a key.

Revision ID: 0016_idempotency_per_requester
Revises: 0015_token_resume_queues
Create Date: 2026-12-02
"""

from alembic import op

revision = "0016_idempotency_per_requester"
down_revision = "0015_token_resume_queues"
branch_labels = None
depends_on = None

TABLE = "approval_requests"
KEY_ALONE = "approval_requests_idempotency_key_key"
PER_REQUESTER = "uq_approval_requests_requester_idempotency_key"
NAMING = {"uq": "%(table_name)s_%(column_0_name)s_key"}  # PostgreSQL's own name for a column's UNIQUE


def upgrade() -> None:
    with op.batch_alter_table(TABLE, naming_convention=NAMING) as table:
        table.drop_constraint(KEY_ALONE, type_="unique")
        table.create_unique_constraint(PER_REQUESTER, ["requester", "idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table(TABLE, naming_convention=NAMING) as table:
        table.drop_constraint(PER_REQUESTER, type_="unique")
        table.create_unique_constraint(KEY_ALONE, ["idempotency_key"])
