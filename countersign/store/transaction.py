"""The decision's write transaction without the ORM: a Core `Connection` with the audit events kept
beside it.

A vote or a decision is a few statements in one transaction (the row lock, the conditional UPDATE,
the outbox INSERT carrying the audit events): an ORM `Session` around them added its transaction
bookkeeping, the ORM's execution of each statement and the loading of the `OutboxEvent`s it
inserted, for no object it kept (BENCHMARKS.md "Issue 14, ninth pass: the click and resume off the
ORM"). `Transaction` has the things of a `Session` these statements use: `execute`, `get_bind` and
`info` (where `sql.record` keeps the audit events until a statement takes them along or the
transaction inserts them before it commits: `Queries._transaction`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, CursorResult, Executable
from sqlalchemy.orm import Session
from sqlalchemy.util.typing import TupleAny


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
