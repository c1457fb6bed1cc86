"""The SQL pieces the store's queries and transitions share: conditions on a request's state and the
one conditional UPDATE every transition is made of. Times are the database's clock."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    Table,
    and_,
    bindparam,
    case,
    column,
    func,
    insert,
    literal,
    literal_column,
    not_,
    or_,
    select,
    table,
    text,
    tuple_,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session, load_only
from sqlalchemy.sql.dml import Delete, Insert, Update
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.sql.selectable import TextualSelect

from ..defaults import GRANT_TTL_SECONDS
from .models import (
    ApprovalRequest,
    AuditEvent,
    Base,
    Decider,
    Edit,
    Execution,
    OutboxEvent,
    Outcome,
    Status,
    TimeoutResult,
    Via,
    may_run,
    utcnow,
    utcnow_plus,
)
from .results import NotExecutableWhy
from .rows import COLUMNS, Request, RequestRow, request_row
from .rules import Rules
from .transaction import Transaction

AUDIT = "countersign_audit"
"""`Session.info` key of the audit events a write transaction has recorded and not inserted yet."""
AuditRow = dict[str, Any]
"""One audit event to insert: `request_id`, `event`, `actor` and `detail` (`audit_row`)."""
AUDIT_COLUMNS = ("request_id", "event", "actor", "detail")


def audit_row(request_id: str, event: str, actor: str | None, **detail: Any) -> AuditRow:
    """The values of one audit event (its id and `at`, the transaction's clock, are the database's)."""
    return {"request_id": request_id, "event": event, "actor": actor, "detail": detail}


def record(session: Session | Connection | Transaction, audits: Iterable[AuditRow]) -> None:
    """Record audit events in the write transaction `session` (a `Session`, or a Core
    `transaction.Transaction`), inserted after those recorded before them (ids keep the order) when it
    commits, or with the statement that takes them along (`writes.insert_outbox`,
    `changed_request`). On a `Connection` (a one-statement write on SQLite, `Queries._connection`:
    PostgreSQL's take their events along) they are inserted now."""
    if isinstance(session, Connection):
        if rows := list(audits):
            session.execute(insert(AuditEvent), rows)
        return
    session.info.setdefault(AUDIT, []).extend(audits)


def on_postgresql(session: Session | Connection | Transaction) -> bool:
    """The session's database is PostgreSQL, which has data-modifying CTEs (SQLite has none)."""
    bind = session if isinstance(session, Connection) else session.get_bind()
    return bind.dialect.name == "postgresql"


def insert_if_new(session: Session | Transaction, model: type[Base], values: dict[str, Any]) -> Insert:
    """`INSERT ... ON CONFLICT DO NOTHING` of one `model` row (no RETURNING yet)."""
    dialect = postgresql if on_postgresql(session) else sqlite
    stmt: Insert = dialect.insert(model).values(**values).on_conflict_do_nothing()
    return stmt


def json_rows(param: str, fields: str, where: str = "") -> TextualSelect:
    """PostgreSQL: the rows of the JSONB array bound as `param` (`.bindparams(param=[{...}, ...])`)
    as a SELECT of `fields` (`r` is a row's object), in the array's order, for `where`: one
    parameter whatever the number of rows, so the statement stays in SQLAlchemy's compiled cache
    (a multi-row VALUES is compiled again on every call); built once, bound on each use."""
    rows = f"jsonb_array_elements(:{param}) WITH ORDINALITY AS rows(r, n)"
    sql = f"SELECT {fields} FROM {rows} {where} ORDER BY n"
    names = [name.strip() for name in fields.split(",")]
    return text(sql).bindparams(bindparam(param, type_=JSONB)).columns(*(column(name) for name in names))


AUDIT_ROWS = "r->>'request_id', r->>'event', r->>'actor', r->'detail'"
ALL_AUDITS = json_rows("audits", AUDIT_ROWS)
AUDITS_IF_CHANGED = json_rows("audits", AUDIT_ROWS, "WHERE EXISTS (SELECT FROM changed)")
"""The audit events of `changed_request`'s change, inserted only if it changed a row (its CTE is
named `changed`)."""
OUTBOX_COLUMNS = ("request_id", "queue", "func", "webhook", "job_id", "body")
"""The columns of a resume event its writer gives (`writes.insert_outbox`, `expiries`)."""


REQUESTS = cast(Table, ApprovalRequest.__table__)
"""The requests' table, for Core statements that load no `ApprovalRequest` (no ORM layer)."""
CHANGED = table("changed", *(column(each.name, each.type) for each in ApprovalRequest.__table__.c))
"""The rows `changed_request`'s CTE (named `changed`) returns, as a table declared once."""
CHANGED_ID = CHANGED.c.id


def changed_request(
    session: Session | Connection | Transaction,
    stmt: Insert | Update,
    audits: Sequence[AuditRow],
    *extra: Any,
    also: Callable[[Any], Delete | Update] | None = None,
    row: bool = True,
    params: dict[str, Any] | None = None,
) -> Sequence[Any] | None:
    """Run `stmt`, an INSERT or a conditional UPDATE of at most one request (without RETURNING),
    and, only if it changed the row, insert `audits` and run `also(changed ids)`: on PostgreSQL all
    in the one statement (data-modifying CTEs: `WITH changed AS (stmt RETURNING ...), audit AS
    (INSERT INTO audit_events SELECT ... WHERE EXISTS (SELECT FROM changed)) SELECT ... FROM
    changed`), elsewhere the audits recorded for the commit (`record`) and `also` run after it.
    Returns `(request, *extra)` as the row is now (a plain `rows.RequestRow`, no ORM object;
    `extra`: labelled expressions computed as it changed), or None when it changed nothing. With
    `row=False`, `(request id, *extra)`: the statement returns the id alone and no row is decoded
    (its 40-odd columns, JSON ones among them), for a caller that only needs to know whether the
    change happened.

    `params`: the values of `stmt`'s (and `extra`'s) bound parameters, for a statement built once
    and bound on each call (a module constant): then the statement around it is built once too
    (`_around`, kept by the identity of `stmt` and `extra`), so SQLAlchemy neither builds it nor
    computes its cache key again (about a third of this function's CPU when built per call)."""
    build = _around if params is not None else _around.__wrapped__
    outer = build(stmt, on_postgresql(session), bool(audits), also, row, extra)
    bound = dict(params or {})
    if outer.cte_audits:
        bound["audits"] = list(audits)
    result = session.execute(outer.statement, bound or None).one_or_none()
    found = result if result is None or not row else (request_row(result), *result[COLUMNS:])
    if found is not None and not outer.cte_audits and not outer.cte_also:
        if also is not None:
            session.execute(also([found[0].id if row else found[0]]))
        record(session, audits)
    return found


class _Around(NamedTuple):
    """`changed_request`'s statement, and whether it inserts the audits (bound as `audits`) and runs
    `also` in itself (PostgreSQL's CTEs)."""

    statement: Any
    cte_audits: bool
    cte_also: bool


@functools.lru_cache(maxsize=64)
def _around(
    stmt: Insert | Update,
    postgresql: bool,
    audits: bool,
    also: Callable[[Any], Delete | Update] | None,
    row: bool,
    extra: tuple[Any, ...],
) -> _Around:
    """The statement `changed_request` runs for `stmt` (see there); kept for statements built once."""
    if not (postgresql and (audits or also)):
        returning = stmt.returning(REQUESTS if row else REQUESTS.c.id, *extra)
        if isinstance(stmt, Update):  # an ORM one's rows need no synchronising: the row comes back
            returning = returning.execution_options(synchronize_session=False)
        return _Around(returning, False, False)
    changed = stmt.returning(REQUESTS if row else REQUESTS.c.id, *extra).cte("changed")
    ctes = [insert(AuditEvent).from_select(AUDIT_COLUMNS, AUDITS_IF_CHANGED).cte("audit")] if audits else []
    if also is not None:
        ctes.append(also(select(CHANGED_ID)).cte("also"))
    extras: list[Any] = [literal_column(f"{CHANGED.name}.{each.name}") for each in extra]
    outer = select(CHANGED if row else CHANGED_ID, *extras).add_cte(changed, *ctes)
    return _Around(outer, audits, also is not None)


def verdict(
    outcome: Outcome,
    decided_by: list[Decider] | ColumnElement[Any],
    via: Via,
    reason: str | ColumnElement[Any] | None,
    grant_ttl: int | ColumnElement[int],
    approved_payload: dict[str, Any] | ColumnElement[Any] | None = None,
    edits: list[Edit] | ColumnElement[Any] | None = None,
    timeout_result: TimeoutResult | None = None,
) -> dict[str, Any]:
    """The column values of a decision (each value may be a bound parameter, for a statement built
    once: `statements.decided`). What may run (`approved_payload`, and a grant expiring `grant_ttl`
    seconds after the database's now) is set for approvals and for timeouts that `allow`."""
    values: dict[str, Any] = {
        "status": Status(outcome),
        "decided_by": decided_by,
        "decided_via": via,
        "decision_reason": reason,
        "decided_at": utcnow(),
        "edits": [] if edits is None else edits,
        "timeout_result": timeout_result,
    }
    if may_run(outcome, timeout_result):
        values["approved_payload"] = approved_payload if approved_payload is not None else REQUESTS.c.payload
        values["grant_expires_at"] = utcnow_plus(grant_ttl)
    return values


CARD_SHOWN = ApprovalRequest.card_ts.is_not(None)
"""A request whose card was posted: only such a request's timeout may `allow` (someone saw it)."""

CLOCK_RUNNING = or_(CARD_SHOWN, ApprovalRequest.card_attempts > 0, ApprovalRequest.card_lease_until.is_(None))
"""The level's clock runs: its card is posted, or a post of it was tried (Slack may refuse it for
good: the level then times out, failing closed), or it was never scheduled. A card waiting for its
time in its channel that no poster has tried yet (`Store.schedule_card` set its lease; `card_attempts`
0) has no clock: its `expires_at` is an estimate from its reserved time, and the router being down,
or its worker late, must not time it out unseen. It gets its clock when the card is posted
(`Store.attach_card`), or when a post is tried (`Store.claim_card`) and Slack refuses it."""


def timeout_due() -> Any:
    """The level's deadline has passed (database clock) and its clock runs (`CLOCK_RUNNING`): what
    every timeout checks (`expire_due`, `expire_all_due`, `Store.escalate`, `due_for_timeout`)."""
    return and_(ApprovalRequest.expires_at <= utcnow(), CLOCK_RUNNING)


def expire_due(
    session: Session, due: Sequence[Request], asked: TimeoutResult, grant_ttl: int
) -> list[ApprovalRequest]:
    """One conditional UPDATE ... RETURNING expiring `due`: each still pending at the level it was
    read at and past its `expires_at` (database clock), its clock running (`CLOCK_RUNNING`). The
    timeout decides `asked`, but `allow` only for a row with a card (`card_ts`, as the UPDATE finds
    it; the others are denied), with a grant valid `grant_ttl` seconds; a row with a card is due
    for its rewrite now (`card_refresh_due_at`). Returns the rows expired (not those something else
    got to first)."""
    allowed = CARD_SHOWN if asked == TimeoutResult.ALLOW else None
    where = (
        tuple_(ApprovalRequest.id, ApprovalRequest.level).in_([(row.id, row.level) for row in due]),
        ApprovalRequest.status == Status.PENDING,
        timeout_due(),
    )
    stmt = (
        update(ApprovalRequest)
        .where(*where)
        .values(**_expiry(allowed, grant_ttl))
        .returning(ApprovalRequest)
        .execution_options(synchronize_session=False)
    )
    return list(session.scalars(stmt))


def _expiry(allowed: ColumnElement[bool] | None, grant_ttl: int | ColumnElement[int]) -> dict[str, Any]:
    """The column values of an expiry (`expire_due`, `expire_all_due`): `deny`, or, for a row for
    which `allowed` holds as the UPDATE finds it (None: for none), `allow` with what it sets beyond
    `deny`: the payload to run and a grant valid `grant_ttl` seconds (a number, or read from the row
    in SQL). A row with a card is due for its rewrite now (`card_refresh_due_at`)."""
    values = verdict(Outcome.EXPIRED, [], Via.TIMEOUT, None, grant_ttl, timeout_result=TimeoutResult.DENY)
    if allowed is not None:
        allow = verdict(Outcome.EXPIRED, [], Via.TIMEOUT, None, grant_ttl, timeout_result=TimeoutResult.ALLOW)
        for column in ("timeout_result", "approved_payload", "grant_expires_at"):
            values[column] = case((allowed, allow[column]), else_=values.get(column))
    return values | {"card_refresh_due_at": case((CARD_SHOWN, utcnow()))}


TIMEOUT_RULES = {
    "postgresql": (
        "COALESCE(approval_requests.rules -> 'levels' -> GREATEST(0, LEAST(approval_requests.level,"
        " jsonb_array_length(approval_requests.rules -> 'levels') - 1)) ->> 'on_timeout', 'deny')",
        "COALESCE(jsonb_array_length(approval_requests.rules -> 'levels'), 0)",
        f"COALESCE((approval_requests.rules ->> 'grant_ttl')::integer, {GRANT_TTL_SECONDS})",
    ),
    "sqlite": (
        "COALESCE(json_extract(approval_requests.rules, '$.levels[' || MAX(0, MIN(approval_requests.level,"
        " json_array_length(approval_requests.rules, '$.levels') - 1)) || '].on_timeout'), 'deny')",
        "COALESCE(json_array_length(approval_requests.rules, '$.levels'), 0)",
        f"COALESCE(json_extract(approval_requests.rules, '$.grant_ttl'), {GRANT_TTL_SECONDS})",
    ),
}
"""Per dialect, read from a request's stored `rules` (JSON, `Rules.to_json`) in SQL: its current
level's `on_timeout` (`Rules.level`: the last level past the end; `deny` without levels), how many
levels it has, and its grant's lifetime in seconds."""


EXPIRED_COLUMNS = (
    *(ApprovalRequest.id, ApprovalRequest.idempotency_key, ApprovalRequest.action, ApprovalRequest.status),
    *(ApprovalRequest.payload, ApprovalRequest.approved_payload, ApprovalRequest.edits),
    *(ApprovalRequest.decided_by, ApprovalRequest.decided_via, ApprovalRequest.decision_reason),
    *(ApprovalRequest.decided_at, ApprovalRequest.policy_version, ApprovalRequest.policy_sha256),
    *(ApprovalRequest.timeout_result, ApprovalRequest.grant_expires_at, ApprovalRequest.level),
    *(ApprovalRequest.resume_queue, ApprovalRequest.resume_func, ApprovalRequest.resume_webhook),
    *(ApprovalRequest.card_ts, ApprovalRequest.card_attempts),
)
"""The columns `expire_all_due` returns: those of the decision (`decision_of`, its grant), of the
resume event's target, and what the sweep logs and checks (level, card). The others (the stored
rules, context, approvers, ...) are not loaded: most of the cost of reading a row back was
decoding its JSON columns."""


def expire_all_due(session: Session, limit: int) -> list[ApprovalRequest]:
    """One UPDATE ... RETURNING expiring up to `limit` requests due (pending, past `expires_at`, its
    clock running: `CLOCK_RUNNING`; oldest first) whose current level does not escalate (its
    `on_timeout` is not `escalate`, or it is the last level), its policy read from the stored rules
    in SQL (`TIMEOUT_RULES`): no row is read before, and only `EXPIRED_COLUMNS` are returned
    (another attribute of a returned row raises SQLAlchemy's `DetachedInstanceError` once the
    session is closed). As `expire_due`: `allow` only for a row with a card (`card_ts`), with a
    grant valid its rules' `grant_ttl`, the others `deny`; a row with a card is due for its rewrite
    now. On PostgreSQL the due rows are locked as found, skipping rows another transaction holds (a
    click deciding it, another sweep: `FOR UPDATE SKIP LOCKED`). Returns the rows expired, in any
    order."""
    stmt = _expire_all_due(session.get_bind().dialect.name)
    return list(session.scalars(stmt, {"limit": limit}))


@functools.cache
def _expire_all_due(dialect: str) -> Update:
    """`expire_all_due`'s statement on `dialect`, built once (it runs every second, mostly expiring
    nothing: building it was most of an idle call), its LIMIT bound as `limit`."""
    return (
        expiry_update(dialect)
        .returning(ApprovalRequest)
        .options(load_only(*EXPIRED_COLUMNS))
        .execution_options(synchronize_session=False)
    )


@functools.cache
def expiry_update(dialect: str) -> Update:
    """The UPDATE (without RETURNING) expiring up to `limit` (a bound parameter) due requests that
    do not escalate, on `dialect`, as `expire_all_due` describes; built once (`expire_all_due`,
    and on PostgreSQL `expiries.expire_all_due_pg`)."""
    read: list[ColumnClause[Any]] = [literal_column(sql) for sql in TIMEOUT_RULES[dialect]]
    on_timeout, levels, grant_ttl = read
    escalates = and_(on_timeout == "escalate", ApprovalRequest.level + 1 < levels)
    due = (
        select(ApprovalRequest.id)
        .where(is_pending(), timeout_due(), not_(escalates))
        .order_by(ApprovalRequest.expires_at)
        .limit(bindparam("limit", type_=Integer))
        .with_for_update(skip_locked=True)
        .cte("due")
    )
    if dialect == "postgresql":  # picked once: a nested-loop plan would re-run the LIMIT for each row
        due = due.prefix_with("MATERIALIZED")
    return (
        update(ApprovalRequest)
        .where(ApprovalRequest.id.in_(select(due.c.id)), ApprovalRequest.status == Status.PENDING)
        .values(**_expiry(and_(on_timeout == "allow", CARD_SHOWN), grant_ttl))
    )


def update_request(
    session: Session, where: tuple[Any, ...], *audits: AuditRow, **values: Any
) -> RequestRow | None:
    """One conditional UPDATE of a request, with the audit events of the change (`changed_request`):
    the updated row, or None when `where` did not hold (someone else got there first)."""
    found = changed_request(session, update(ApprovalRequest).where(*where).values(**values), audits)
    row: RequestRow | None = None if found is None else found[0]
    return row


NOTED = (
    select(OutboxEvent.id)
    .where(OutboxEvent.request_id == bindparam("for_request"), OutboxEvent.problem.is_not(None))
    .exists()
    .label("problem")
)
"""A problem is noted on the resume event of the request bound as `for_request`."""


def execution_update(
    session: Session | Connection, stmt: Update, request_id: str, audit: AuditRow, **params: Any
) -> bool:
    """Run `stmt`, the agent's worker claiming or reporting an execution (a conditional UPDATE of
    the request bound as `for_request`, built once; `params` its other bound values), with its
    `audit` event: True when it changed the row. The worker has the decision, so a problem noted on
    the resume event is cleared (`problem_cleared`) with the change: in the same statement on
    PostgreSQL (`changed_request`'s `also`), elsewhere by a second statement only when the UPDATE's
    RETURNING says there is one. Only the id comes back (`changed_request`'s `row=False`): the
    worker needs no more than whether it happened."""
    bound = {"for_request": request_id, **params}
    if on_postgresql(session):
        found = changed_request(session, stmt, [audit], also=problem_cleared, row=False, params=bound)
        return found is not None
    found = changed_request(session, stmt, [audit], NOTED, row=False, params=bound)
    if found is not None and found[1]:  # a problem is noted
        resume_taken(session, request_id)
    return found is not None


def problem_cleared(request_ids: Any) -> Update:
    """The UPDATE clearing the problems noted on the resume events of `request_ids` (a list, or a
    subquery of ids)."""
    return (
        update(OutboxEvent)
        .where(OutboxEvent.request_id.in_(request_ids), OutboxEvent.problem.is_not(None))
        .values(problem=None)
    )


def resume_taken(session: Session | Connection, request_id: str) -> None:
    """The agent's worker has the request's decision (it claimed or reported the execution): clear
    the problem noted on its resume event, if any (in the caller's transaction)."""
    session.execute(problem_cleared([request_id]))


def is_pending() -> Any:
    """`status = 'pending'` with the literal in the SQL text, not a bound parameter, so that the
    partial indexes `WHERE status = 'pending'` (migration 0005) match it on both backends, also in
    a prepared statement's generic plan."""
    return REQUESTS.c.status == literal(Status.PENDING.value, literal_execute=True)


def approver_is(dialect: str, user_id: str) -> Any:
    """The request's current `approvers` (a JSON array of Slack user ids) include `user_id`."""
    if dialect == "postgresql":
        return type_coerce(ApprovalRequest.approvers, JSONB).contains([user_id])
    each = func.json_each(ApprovalRequest.approvers).table_valued("value")
    return select(each.c.value).where(each.c.value == user_id).exists()


def not_timed_out() -> Any:
    """The request has no deadline, or it has not passed (database clock)."""
    return or_(REQUESTS.c.expires_at.is_(None), REQUESTS.c.expires_at > utcnow())


def no_live_card_lease() -> Any:
    """Nobody holds an unexpired lease on posting the request's card (database clock)."""
    return or_(ApprovalRequest.card_lease_until.is_(None), ApprovalRequest.card_lease_until <= utcnow())


def deadline(rules: Rules, level: int, after_seconds: int = 0) -> utcnow_plus | None:
    """When escalation `level` times out if its clock starts `after_seconds` from the database's
    now, or None for a level without a timeout."""
    timeout = rules.level(level).timeout_seconds
    return utcnow_plus(after_seconds + timeout) if timeout else None


def level_clock(rules: Rules, level: int) -> dict[str, Any]:
    """The columns of escalation `level`'s clock started now (database clock): its deadline
    (`expires_at`), `level_started_at`, and its first reminder, none sent yet."""
    offsets = rules.reminders_seconds
    return clock_from(rules.level(level).timeout_seconds or None, offsets[0] if offsets else None)


def clock_from(
    timeout: int | ColumnElement[int] | None, reminder: int | ColumnElement[int] | None
) -> dict[str, Any]:
    """`level_clock`'s columns for a level timing out `timeout` seconds from now and reminding
    `reminder` seconds from now (each a number, a bound parameter, or None for none)."""
    return {
        "expires_at": None if timeout is None else utcnow_plus(timeout),
        "level_started_at": utcnow(),
        "next_reminder_at": None if reminder is None else utcnow_plus(reminder),
        "reminders_sent": 0,
    }


def why_not_executable(request: Request | None) -> NotExecutableWhy:
    """Why `Store.claim_execution` found nothing to claim: `outcome_unknown` when a run was claimed
    and never reported how it went (started, no outcome), `already_failed` when it reported a
    failure (or raised), `already_executed` when it succeeded."""
    if request is None:
        return "unknown_request"
    if request.approved_payload is None:
        return "not_approved"
    if request.execution is None:
        return "grant_expired"
    if request.execution == Execution.STARTED:
        return "outcome_unknown"
    return "already_failed" if request.execution == Execution.FAILED else "already_executed"
