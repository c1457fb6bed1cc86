"""Initial schema: approval requests, audit events, outbox, dead letters.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType, UTCDateTime, utcnow

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approval_requests",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("idempotency_key", sa.String(255), nullable=False, unique=True),
        sa.Column("action", sa.String(64), nullable=False, index=True),
        sa.Column("payload", JSONType, nullable=False),
        sa.Column("payload_sha256", sa.String(64), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("context", JSONType),
        sa.Column("requester", sa.String(255), nullable=False),
        sa.Column("on_behalf_of", sa.String(32)),
        sa.Column("run_id", sa.String(255)),
        sa.Column("step", sa.String(255)),
        sa.Column("confidence", sa.Float()),
        sa.Column("resume_queue", sa.String(255), nullable=False),
        sa.Column("resume_func", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column("approvers", JSONType, nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=False),
        sa.Column("policy_sha256", sa.String(64), nullable=False),
        sa.Column("card_ts", sa.String(32)),
        sa.Column("created_at", UTCDateTime(), server_default=utcnow(), nullable=False),
        sa.Column("decided_at", UTCDateTime()),
        sa.Column("decided_by", JSONType),
        sa.Column("decided_via", sa.String(16)),
        sa.Column("decision_reason", sa.Text()),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(64), nullable=False, index=True),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(255)),
        sa.Column("detail", JSONType, nullable=False),
        sa.Column("at", UTCDateTime(), server_default=utcnow(), nullable=False),
    )
    op.create_table(
        "dead_letters",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("received", JSONType, nullable=False),
        sa.Column("at", UTCDateTime(), server_default=utcnow(), nullable=False),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "request_id", sa.String(26), sa.ForeignKey("approval_requests.id"), nullable=False, index=True
        ),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("func", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False, unique=True),
        sa.Column("body", JSONType, nullable=False),
        sa.Column("created_at", UTCDateTime(), server_default=utcnow(), nullable=False),
        sa.Column("published_at", UTCDateTime()),
    )


def downgrade() -> None:
    for table in ("outbox", "dead_letters", "audit_events", "approval_requests"):
        op.drop_table(table)
