"""The one INSERT of a transaction's resume events, returning plain rows (`rows.OutboxRow`), in a
`Session` or a Core `transaction.Transaction` (the vote's and the decision's: BENCHMARKS.md "Issue 14,
ninth pass: the click and resume off the ORM")."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Executable, Table, insert

from .models import AuditEvent, OutboxEvent
from .rows import OutboxRow
from .sql import ALL_AUDITS, AUDIT, AUDIT_COLUMNS, OUTBOX_COLUMNS, json_rows, on_postgresql
from .transaction import Writer

OUTBOX = cast(Table, OutboxEvent.__table__)
OUTBOX_ROWS = json_rows(
    "events", "r->>'request_id', r->>'queue', r->>'func', r->>'webhook', r->>'job_id', r->'body'"
)
INSERT_OUTBOX = insert(OUTBOX).returning(*OUTBOX.c)
"""SQLite's (any database without data-modifying CTEs) multi-row INSERT of resume events (SQLAlchemy's
"insertmanyvalues"), on the table, RETURNING them."""


def insert_outbox(writer: Writer, rows: Sequence[dict[str, Any]]) -> list[OutboxRow]:
    """One INSERT of resume events (`request_id`, `queue`, `func`, `webhook`, `job_id`, `body`)
    RETURNING them as plain rows, in any order: on PostgreSQL from one JSONB parameter
    (`sql.json_rows`), carrying the audit events recorded so far in the transaction (`WITH audit AS
    (INSERT INTO audit_events ...) INSERT ...`: one statement where there were two; `_outbox_insert`);
    elsewhere a multi-row INSERT, the audit events inserted at commit. A Core statement on the table
    either way: no `OutboxEvent` is loaded."""
    if not on_postgresql(writer):
        return [OutboxRow(*row) for row in writer.execute(INSERT_OUTBOX, list(rows))]
    audits = writer.info.pop(AUDIT, None)
    params = {"events": list(rows)} | ({"audits": audits} if audits else {})
    return [OutboxRow(*row) for row in writer.execute(_outbox_insert(bool(audits)), params)]


@functools.cache
def _outbox_insert(audits: bool) -> Executable:
    """PostgreSQL: `insert_outbox`'s statement, with or without the `audits` CTE, built once each,
    bound as `events` and `audits` (JSONB arrays), RETURNING the outbox table's columns."""
    stmt = insert(OUTBOX).from_select(OUTBOX_COLUMNS, OUTBOX_ROWS).returning(*OUTBOX.c)
    if audits:
        audit_events = cast(Table, AuditEvent.__table__)
        stmt = stmt.add_cte(insert(audit_events).from_select(AUDIT_COLUMNS, ALL_AUDITS).cte("audit"))
    return stmt
