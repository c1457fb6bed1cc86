"""Resume by webhook: a request may name a URL instead of an RQ queue and function
(`approval_requests.resume_webhook`), and its outbox row keeps the delivery's state (`outbox.webhook`,
`attempts`, `next_attempt_at`) with a partial index for the sweep that POSTs what is due.

Revision ID: 0011_webhook_resume
Revises: 0009
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import UTCDateTime

revision = "0011_webhook_resume"
down_revision = "0009"
branch_labels = None
depends_on = None

INDEX = "ix_outbox_webhooks_due"
PREDICATE = "next_attempt_at IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("resume_webhook", sa.Text))
        batch.alter_column("resume_queue", existing_type=sa.String(255), nullable=True)
        batch.alter_column("resume_func", existing_type=sa.String(255), nullable=True)
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("webhook", sa.Text))
        batch.add_column(sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("next_attempt_at", UTCDateTime()))
        batch.alter_column("queue", existing_type=sa.String(255), nullable=True)
        batch.alter_column("func", existing_type=sa.String(255), nullable=True)
    op.create_index(
        INDEX,
        "outbox",
        ["next_attempt_at"],
        postgresql_where=sa.text(PREDICATE),
        sqlite_where=sa.text(PREDICATE),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("next_attempt_at")
        batch.drop_column("attempts")
        batch.drop_column("webhook")
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("resume_webhook")
