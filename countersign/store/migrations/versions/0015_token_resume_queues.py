"""The RQ queues an API token's requests may name for their resume jobs (`api_tokens.resume_queues`,
a JSON list; `api.auth.may_create`). A token created before this revision keeps NULL: any queue but
countersign's own (`defaults.ROUTER_QUEUES`), as it could before; `countersign token create` writes
a list, empty unless `--resume-queue` is given.

Revision ID: 0015_token_resume_queues
Revises: 0014_decided_by_index
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from countersign.store.models import JSONType

revision = "0015_token_resume_queues"
down_revision = "0014_decided_by_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as table:
        table.add_column(sa.Column("resume_queues", JSONType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as table:
        table.drop_column("resume_queues")
