"""The decision's write transaction without the ORM: a Core `Connection` with the audit events kept
beside it, and the one INSERT of the resume events.

A vote or a decision is a few statements in one transaction (the row lock, the conditional UPDATE
RETURNING the row, the outbox INSERT carrying the audit events): an ORM `Session` around them added
its transaction bookkeeping, the ORM's execution of each statement and the loading of the
`OutboxEvent`s it inserted, for no object it kept (BENCHMARKS.md "Issue 14, ninth pass: the click
and resume off the ORM"). `Transaction` has the two things of a `Session` these statements use:
`execute` and `info` (where `sql.record` keeps the audit events until a statement takes them along or
the transaction inserts them before it commits: `Queries._transaction`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Executable, Table, insert
from sqlalchemy.orm import Session
from sqlalchemy.util.typing import TupleAny

from .models import AuditEvent, OutboxEvent
from .rows import OutboxRow
from .sql import ALL_AUDITS, AUDIT, AUDIT_COLUMNS, OUTBOX_COLUMNS, json_rows, on_postgresql


class Transaction:
    """A write transaction on `connection` (a Core `Connection` that `begin()` opened), with `info`:
    what a `Session.info` holds for `sql.record` and `insert_outbox`."""

    __slots__ = ("connection", "info")

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.info: dict[str, Any] = {}

    def execute(self, statement: Executable, params: Any = None) -> CursorResult[*TupleAny]:
        """Run `statement` in the transaction (`Connection.execute`)."""
        return self.connection.execute(statement, params)

    def get_bind(self) -> Connection:
        """The connection, as `Session.get_bind` answers (`sql.on_postgresql`)."""
        return self.connection


Writer = Session | Transaction
"""A write transaction: an ORM `Session` (`Queries._write`) or a Core one (`Queries._transaction`)."""

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
