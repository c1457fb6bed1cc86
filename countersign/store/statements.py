"""The statements of the store's hot paths (an approval's cycle: create, attach the card, lock
and decide, claim and report the execution, the card's facts), built once and bound on each call.

SQLAlchemy computes a statement's cache key once per statement object and keeps its compiled form
by that key: a statement built on each call costs its construction, the coercion of every value,
and a cache key walked over all its columns, every time (most of the store's CPU in an approval's
cycle, BENCHMARKS.md "Issue 14, seventh pass: the store's CPU"). So these are module constants, or
built once per shape (`functools.cache`), with their values as named bound parameters. A parameter
is never named after a column: SQLAlchemy takes such a parameter of an executed INSERT or UPDATE as
that column's new value."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Literal, NamedTuple, cast

from sqlalchemy import Integer, Row, Table, bindparam, case, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert, Update
from sqlalchemy.sql.elements import BindParameter

from .models import (
    AuditEvent,
    Decider,
    Edit,
    Execution,
    IntakeOutbox,
    OutboxEvent,
    Outcome,
    Status,
    Via,
    utcnow,
    utcnow_plus,
)
from .rows import RequestRow
from .sql import REQUESTS, clock_from, is_pending, not_timed_out, verdict

BIND: Callable[[str], BindParameter[Any]] = bindparam
"""A named bound parameter of a value given on each call, its type the column's it is set to."""
FOR_REQUEST: BindParameter[str] = bindparam("for_request")
"""The request id a statement is about, bound on each call."""
OUTBOX = cast(Table, OutboxEvent.__table__)
AUDITS = cast(Table, AuditEvent.__table__)
REQUEST = select(REQUESTS).where(REQUESTS.c.id == FOR_REQUEST)
"""`Queries.get`'s SELECT, of the row (`rows.request_row`)."""
REQUESTER = select(REQUESTS.c.requester).where(REQUESTS.c.id == FOR_REQUEST)
"""`Queries.requester_of`'s SELECT, of the one column."""
CARD_FACTS = select(
    REQUESTS,
    select(OUTBOX.c.problem).where(OUTBOX.c.request_id == FOR_REQUEST).limit(1).scalar_subquery(),
    select(AUDITS.c.detail)
    .where(AUDITS.c.request_id == FOR_REQUEST, AUDITS.c.event == "execution_refused")
    .order_by(AUDITS.c.id.desc())
    .limit(1)
    .scalar_subquery(),
).where(REQUESTS.c.id == FOR_REQUEST)
"""`Queries.card_facts`'s SELECT: the request's row, its resume event's problem and its latest refusal."""
PENDING_COUNT = select(func.count()).select_from(
    select(literal(1))
    .where(
        is_pending(),
        REQUESTS.c.action == bindparam("of_action"),
        REQUESTS.c.requester == bindparam("of_requester"),
    )
    .limit(bindparam("up_to", type_=Integer))
    .subquery()
)
"""`Queries.pending_count`'s SELECT, bound as `of_action`, `of_requester` and `up_to`."""


REFRESH_LATER = (
    update(REQUESTS)
    .where(REQUESTS.c.id == FOR_REQUEST)
    .values(card_refresh_due_at=utcnow_plus(bindparam("after_seconds", type_=Integer)))
)
"""`Deliveries.refresh_card_later`'s UPDATE, on the table (no ORM layer), bound as `for_request` and
`after_seconds`."""


@functools.cache
def attach(timeout: bool, reminder: bool) -> Update:
    """`Deliveries.attach_card`'s UPDATE for a level with or without a `timeout` and a `reminder`,
    built once each, bound as `for_request`, `at_level`, `new_channel`, `new_ts`, `timeout_seconds` and
    `reminder_seconds`: the card's place, and for a pending request the level's clock started now."""
    seconds = {name: bindparam(f"{name}_seconds", type_=Integer) for name in ("timeout", "reminder")}
    pending = REQUESTS.c.status == Status.PENDING
    clock = clock_from(seconds["timeout"] if timeout else None, seconds["reminder"] if reminder else None)
    return (
        update(REQUESTS)
        .where(
            REQUESTS.c.id == FOR_REQUEST,
            REQUESTS.c.card_ts.is_(None),
            REQUESTS.c.level == bindparam("at_level"),
        )
        .values(
            channel=bindparam("new_channel"),
            card_ts=bindparam("new_ts"),
            **{column: case((pending, value), else_=REQUESTS.c[column]) for column, value in clock.items()},
        )
    )


CLAIM = (
    update(REQUESTS)
    .where(
        REQUESTS.c.id == FOR_REQUEST,
        REQUESTS.c.approved_payload.is_not(None),
        REQUESTS.c.execution.is_(None),
        REQUESTS.c.grant_expires_at > utcnow(),
    )
    .values(execution=Execution.STARTED, executed_at=utcnow())
)
"""`Store.claim_execution`'s UPDATE of the request bound as `for_request` (`sql.execution_update`)."""
OUTCOME = (
    update(REQUESTS)
    .where(
        REQUESTS.c.id == FOR_REQUEST,
        REQUESTS.c.approved_payload.is_not(None),
        or_(REQUESTS.c.execution.is_(None), REQUESTS.c.execution == Execution.STARTED),
    )
    .values(
        execution=bindparam("new_execution"), execution_detail=bindparam("new_detail"), executed_at=utcnow()
    )
)
"""`Store.record_outcome`'s UPDATE of the request bound as `for_request` to `new_execution` with its
`new_detail` (`sql.execution_update`)."""
LOCKED = (
    select(REQUESTS, not_timed_out().label("on_time")).where(REQUESTS.c.id == FOR_REQUEST).with_for_update()
)
"""`Store._locked`'s SELECT of the row of the request bound as `for_request`, and whether it is on time."""
SAME_KEY = select(REQUESTS).where(
    REQUESTS.c.requester == bindparam("of_requester"), REQUESTS.c.idempotency_key == bindparam("of_key")
)
"""`Store.create_approved`'s SELECT of the request bound as `of_requester` and `of_key` (its
idempotency key), when its INSERT found one."""


@functools.cache
def created(dialect: str, columns: Sequence[str], timeout: bool, reminder: bool, lease: bool) -> Insert:
    """`Store.create`'s `INSERT ... ON CONFLICT DO NOTHING` on `dialect` of a pending request with
    `columns` (a tuple; each bound as `new_<column>`), and the first level's clock started now
    (`sql.clock_from`: with or without a `timeout` and a `reminder`, bound as `timeout_seconds` and
    `reminder_seconds`), and with `lease` its card's posting lease taken for `lease_seconds`:
    built once per shape."""
    seconds = {name: bindparam(f"{name}_seconds", type_=Integer) for name in ("timeout", "reminder")}
    values: dict[str, Any] = {column: bindparam(f"new_{column}") for column in columns}
    values |= clock_from(seconds["timeout"] if timeout else None, seconds["reminder"] if reminder else None)
    if lease:
        lease_until = utcnow_plus(bindparam("lease_seconds", type_=Integer))
        values |= {"card_lease_until": lease_until, "card_attempts": 1}
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt: Insert = insert(REQUESTS).values(**values, status=Status.PENDING).on_conflict_do_nothing()
    return stmt


class Decision(NamedTuple):
    """A decision of a pending request by a reviewer or the policy (`Store.decide`, `Store.vote`):
    `sql.verdict`'s arguments."""

    outcome: Literal[Outcome.APPROVED, Outcome.REJECTED]
    decided_by: list[Decider]
    via: Via
    reason: str | None
    grant_ttl: int
    approved_payload: dict[str, Any] | None = None
    edits: list[Edit] | None = None

    def update(self, request_id: str) -> tuple[Update, dict[str, Any]]:
        """The conditional UPDATE of request `request_id` out of `pending` to this decision,
        returning the columns it sets (`decided`), and its parameters."""
        edited = self.approved_payload is not None
        params: dict[str, Any] = {"for_request": request_id, "new_decided_by": self.decided_by}
        params["new_reason"] = self.reason
        params |= {"new_edits": self.edits or [], "grant_seconds": self.grant_ttl}
        if edited:
            params["new_payload"] = self.approved_payload
        return decided(self.outcome, self.via, edited), params


@functools.cache
def decided(outcome: Outcome, via: Via, edited: bool) -> Update:
    """The conditional UPDATE out of `pending` of the request bound as `for_request` to `outcome`
    (`sql.verdict`), with or without an `edited` payload, built once each: bound as `new_decided_by`,
    `new_reason`, `new_edits`, `grant_seconds` and `new_payload`. A Core UPDATE (an ORM one runs
    SQLAlchemy's bulk-update machinery) RETURNING the columns it sets, by name (`changed`), or
    nothing: the decision runs on the row it locked, so that row with these is the row as it is now,
    and the columns it does not change (the stored rules, payload, context, ...: most of the cost of
    decoding a row) are not read back."""
    payload = BIND("new_payload") if edited else None
    by, reason, edits = (BIND(name) for name in ("new_decided_by", "new_reason", "new_edits"))
    values = verdict(outcome, by, via, reason, bindparam("grant_seconds", type_=Integer), payload, edits)
    pending = (REQUESTS.c.id == FOR_REQUEST, REQUESTS.c.status == Status.PENDING)
    return update(REQUESTS).where(*pending).values(**values).returning(*(REQUESTS.c[name] for name in values))


def changed(row: RequestRow, found: Row[Any]) -> RequestRow:
    """The locked `row` with the columns a decision's UPDATE returned (`decided`) set."""
    return replace(row, **found._asdict())


@functools.cache
def accepted(dialect: str) -> Insert:
    """`Records.accept`'s `INSERT ... ON CONFLICT DO NOTHING` of an intake message on `dialect`, on
    the table (no ORM layer), bound as `new_id` and `new_message`."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    table = cast(Table, IntakeOutbox.__table__)
    stmt: Insert = (
        insert(table).values(id=BIND("new_id"), message=BIND("new_message")).on_conflict_do_nothing()
    )
    return stmt
