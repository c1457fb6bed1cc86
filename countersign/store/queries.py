"""Reading the countersign database: requests, audit trails, outbox events, and what the sweeps
find due. `Store` (state.py) adds the transitions on top."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, Self

from sqlalchemy import Connection, Engine, func, insert, literal, select
from sqlalchemy.orm import Session

from ..exceptions import UnknownRequest
from .engine import WRITE, create_db_engine, single_statement_engine
from .models import (
    ApprovalRequest,
    AuditEvent,
    Base,
    DeadLetter,
    Execution,
    OutboxEvent,
    ResumeProblem,
    Status,
    Vote,
    standing_problem,
    utcnow,
    utcnow_plus,
)
from .rows import COLUMNS, Request, RequestRow, request_row
from .sql import (
    AUDIT,
    approver_is,
    audit_row,
    insert_if_new,
    is_pending,
    no_live_card_lease,
    not_timed_out,
    record,
    timeout_due,
)
from .statements import CARD_FACTS, PENDING_COUNT, REQUEST, REQUESTER
from .transaction import Transaction, Writer

DEADLINE_FIRST = (
    ApprovalRequest.expires_at.is_(None),
    ApprovalRequest.expires_at,
    ApprovalRequest.created_at,
    ApprovalRequest.id,
)
"""The one order of a reviewer's pending requests, wherever they are listed (App Home, `/countersign
pending`, `countersign pending`): the soonest deadline first, those without one last, then the oldest
first (`created_at`, then id)."""


class CardFacts(NamedTuple):
    """A request and what its decided card says about the agent's side (`Queries.card_facts`)."""

    request: RequestRow
    problem: ResumeProblem | None
    refused: str | None


class Queries:
    """Sessions and reads over the countersign database. Safe to share between threads.

    Objects returned are detached snapshots: read them, never write them back.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**WRITE)
        # On PostgreSQL a statement is a transaction of its own in autocommit: no BEGIN and COMMIT
        # round trips (psycopg sends each apart), on an engine whose connections stay in autocommit
        # (`single_statement_engine`). SQLite keeps its BEGIN [IMMEDIATE] (engine.py).
        self._one_statement = single_statement_engine(engine)

    @property
    def engines(self) -> tuple[Engine, ...]:
        """The engines this store sends statements through: `engine`, and on PostgreSQL the one of
        its single statements in autocommit (`single_statement_engine`), e.g. to listen to their
        events. Disposing `engine` disposes both."""
        return (self.engine,) if self._one_statement is None else (self.engine, self._one_statement)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """A store on `url` (see `create_db_engine`); the schema must already be migrated."""
        return cls(create_db_engine(url))

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction. The audit events it records (`_audit`) are inserted together, in
        the order recorded, by one multi-row INSERT just before it commits (none if it raises), unless
        a statement took them along (`writes.insert_outbox`, `sql.changed_request`)."""
        with Session(self._writer, expire_on_commit=False) as session, session.begin():
            yield session
            audits = session.info.pop(AUDIT, None)
            if audits:
                session.execute(insert(AuditEvent), audits)

    @contextmanager
    def _transaction(self) -> Iterator[Transaction]:
        """A write transaction on a Core `Connection` (`transaction.Transaction`: no ORM `Session`, no
        object loaded), as `_write` runs one: the audit events it records (`_audit`) are inserted
        together, in the order recorded, just before it commits (none if it raises), unless a
        statement took them along (`writes.insert_outbox`)."""
        with self._writer.begin() as connection:
            transaction = Transaction(connection)
            yield transaction
            audits = transaction.info.pop(AUDIT, None)
            if audits:
                connection.execute(insert(AuditEvent), audits)

    @contextmanager
    def _connection(self, write: bool = False) -> Iterator[Connection]:
        """One statement on a connection, with no ORM `Session` (its transaction bookkeeping,
        identity map and ORM execution cost more than the statement on the hot paths): on
        PostgreSQL in autocommit, the statement its own transaction, without the BEGIN and COMMIT
        round trips (a write's audit events ride on it: `sql.changed_request`); on SQLite a
        transaction, `BEGIN IMMEDIATE` for a `write` (`engine.py`), whose audit events `sql.record`
        inserts after its statement."""
        bind = self._one_statement or (self._writer if write else self.engine)
        with bind.begin() as connection:
            yield connection

    @contextmanager
    def _read(self) -> Iterator[Session]:
        """A read: one statement (every read here is one), in autocommit on PostgreSQL (no BEGIN and
        COMMIT round trips: the statement is its own snapshot); a transaction on SQLite."""
        with Session(self._one_statement or self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    @staticmethod
    def _insert(session: Writer, model: type[Base], values: dict[str, Any]) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING; True when a row was inserted."""
        stmt = insert_if_new(session, model, values).returning(literal(1))
        return session.execute(stmt).first() is not None

    @staticmethod
    def _insert_returning(
        session: Session, model: type[Base], values: dict[str, Any], *returning: Any
    ) -> Any:
        """INSERT ... ON CONFLICT DO NOTHING RETURNING `returning` (columns, or the model for the
        row); the first value returned, or None when nothing was inserted."""
        return session.scalars(insert_if_new(session, model, values).returning(*returning)).first()

    @staticmethod
    def _audit(session: Writer, request_id: str, event: str, actor: str | None, **detail: Any) -> None:
        """Record an audit event in the write transaction `session` (inserted when it commits, after
        the events recorded before it: ids keep the order, `at` is the transaction's clock)."""
        record(session, [audit_row(request_id, event, actor, **detail)])

    @staticmethod
    def _one(session: Session, request_id: str) -> ApprovalRequest:
        row = session.get(ApprovalRequest, request_id)
        if row is None:
            raise UnknownRequest(request_id)
        return row

    def get(self, request_id: str) -> RequestRow | None:
        """The request with this id (a plain row), or None."""
        with self._connection() as connection:
            found = connection.execute(REQUEST, {"for_request": request_id}).first()
        return None if found is None else request_row(found)

    def requester_of(self, request_id: str) -> str | None:
        """The `requester` of the stored request `request_id` (one column, one statement: what an
        owner check needs, not the row and its JSON), or None when no request has this id (one not
        stored yet, a dead letter's id, a duplicate's)."""
        with self._connection() as connection:
            found: str | None = connection.execute(REQUESTER, {"for_request": request_id}).scalar()
        return found

    def get_dead_letter(self, letter_id: str) -> DeadLetter | None:
        """The dead letter with this id, or None."""
        with self._read() as session:
            return session.get(DeadLetter, letter_id)

    def audit_trail(self, request_id: str) -> list[AuditEvent]:
        """The audit events of a request (or dead letter), oldest first."""
        with self._read() as session:
            stmt = select(AuditEvent).where(AuditEvent.request_id == request_id).order_by(AuditEvent.id)
            return list(session.scalars(stmt))

    def card_facts(self, request_id: str) -> CardFacts | None:
        """What a decided card shows besides the request, read with it in one statement: the
        problem noted on its resume event (`standing_problem`), and the `why` of its latest
        `execution_refused` audit event; None for an unknown request id.

        A refusal is read from the audit trail rather than stored on the request: it is already
        written there in the refusal's own transaction, it changes no state (the approval stands,
        and a forged or tampered decision refused must not stop the genuine one from running), and
        its one reader is the decided card, rewritten after each execution report
        (`delivery.refresh`, from `router/refreshes.py`). A column would hold the same fact twice,
        need a migration and still have to be ignored once the action runs; the card shows it only
        while nothing ran.
        """
        with self._connection() as connection:
            found = connection.execute(CARD_FACTS, {"for_request": request_id}).one_or_none()
        if found is None:
            return None
        request, (noted, detail) = request_row(found), found[COLUMNS:]
        return CardFacts(
            request, standing_problem(request, noted), None if detail is None else detail.get("why")
        )

    def outbox_event(self, request_id: str) -> OutboxEvent | None:
        """The resume event of a decided request (its `body` is the decision sent), or None."""
        with self._read() as session:
            return session.scalars(select(OutboxEvent).where(OutboxEvent.request_id == request_id)).first()

    def unpublished(self, limit: int = 100) -> list[OutboxEvent]:
        """Outbox events not yet on their RQ queue, oldest first, at most `limit` (not webhooks, which
        `claim_webhooks` finds; with those without a resume target, whose bell the relay rings)."""
        with self._read() as session:
            stmt = (
                select(OutboxEvent)
                .where(OutboxEvent.published_at.is_(None), OutboxEvent.webhook.is_(None))
                .order_by(OutboxEvent.id)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def resume_problems(self, after: int = 0, limit: int = 500) -> list[OutboxEvent]:
        """Resume jobs with a problem noted (`OutboxEvent.problem`: the agent has not run them), by
        outbox id, the `limit` first after the id `after` (to page through them); found through the
        partial index `ix_outbox_problem` (migration 0008). Webhooks are not jobs: their problems are
        their sweep's (`router/webhooks.py`); nor is `outcome_unknown`, which a job that ended does
        not clear (the job that ended is the one that found it), only the outcome."""
        with self._read() as session:
            stmt = (
                select(OutboxEvent)
                .where(
                    OutboxEvent.problem.is_not(None),
                    OutboxEvent.id > after,
                    OutboxEvent.webhook.is_(None),
                    OutboxEvent.problem["event"].as_string() != "outcome_unknown",
                )
                .order_by(OutboxEvent.id)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def published_not_run(self, window_seconds: int, limit: int = 1000) -> list[OutboxEvent]:
        """Outbox events published in the last `window_seconds` (database clock) whose payload has not
        started running (no `execution` recorded on the request) and whose grant was not refused for
        expiry (an `execution_refused` with `why: grant_expired`, which every later delivery would get
        too), newest first; RQ jobs only, not webhooks nor events without a resume target. Other
        refusals do not count: a forged or tampered decision refused must not keep the genuine one
        from running."""
        expired_refusal = select(AuditEvent.id).where(
            AuditEvent.request_id == OutboxEvent.request_id,
            AuditEvent.event == "execution_refused",
            AuditEvent.detail["why"].as_string() == "grant_expired",
        )
        with self._read() as session:
            stmt = (
                select(OutboxEvent)
                .join(ApprovalRequest, ApprovalRequest.id == OutboxEvent.request_id)
                .where(
                    OutboxEvent.published_at > utcnow_plus(-window_seconds),
                    OutboxEvent.queue.is_not(None),
                    ApprovalRequest.execution.is_(None),
                    ~expired_refusal.exists(),
                )
                .order_by(OutboxEvent.published_at.desc())
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def votes(self, request_id: str) -> list[Vote]:
        """The votes cast on a request, oldest first."""
        with self._read() as session:
            return list(session.scalars(select(Vote).where(Vote.request_id == request_id).order_by(Vote.at)))

    def queue_for(self, user_id: str, limit: int = 50) -> list[Request]:
        """The reviewer's queue: the pending requests whose current level's `approvers` include
        `user_id`, not timed out (database clock), without a vote of theirs at this level (a quorum
        they already gave), in `DEADLINE_FIRST` order, at most `limit`. Who may decide is
        `router.review`'s to say (self-approval, the request's state): `review.queue` filters these
        rows with it, for App Home, `/countersign pending` and `countersign pending` alike. User groups
        were resolved to their members at intake and at each escalation, so a group member is listed,
        and a request that escalated is listed for its new approvers only. PostgreSQL answers with a
        JSONB containment (`approvers @> '["U…"]'`) over the partial GIN index
        `ix_approval_requests_pending_approvers` (migration 0005); SQLite scans the pending rows
        (`json_each`): it is the one-machine option."""
        with self._read() as session:
            voted = select(Vote.request_id).where(
                Vote.request_id == ApprovalRequest.id, Vote.slack_user_id == user_id
            )
            stmt = (
                select(ApprovalRequest)
                .where(
                    is_pending(),
                    approver_is(session.get_bind().dialect.name, user_id),
                    not_timed_out(),
                    ~voted.exists(),
                )
                .order_by(*DEADLINE_FIRST)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def decided_by_user(self, user_id: str, limit: int = 10) -> list[Request]:
        """The requests `user_id` decided or voted on that are decided now, latest decision first,
        at most `limit`: the audit trail's `approved`, `rejected` and `vote` events name them as actor
        (found through the partial index `ix_audit_events_decided_by`, not a scan of the trail)."""
        with self._read() as session:
            acted = select(AuditEvent.request_id).where(
                AuditEvent.actor == user_id, AuditEvent.event.in_((Status.APPROVED, Status.REJECTED, "vote"))
            )
            stmt = (
                select(ApprovalRequest)
                .where(ApprovalRequest.id.in_(acted), ApprovalRequest.status != Status.PENDING)
                .order_by(ApprovalRequest.decided_at.desc(), ApprovalRequest.id.desc())
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def counts(self, action: str | None = None) -> dict[tuple[Status, Execution | None], int]:
        """How many requests there are, of action class `action` or of all: `{(status, execution):
        count}` (`execution` is the approved action's run, None before or without one)."""
        with self._read() as session:
            stmt = select(ApprovalRequest.status, ApprovalRequest.execution, func.count()).group_by(
                ApprovalRequest.status, ApprovalRequest.execution
            )
            if action is not None:
                stmt = stmt.where(ApprovalRequest.action == action)
            return {(status, execution): count for status, execution, count in session.execute(stmt)}

    def pending_count(self, action: str, requester: str, up_to: int) -> int:
        """How many requests of action class `action` from `requester` are pending now, counted up
        to `up_to` (a limit needs no more), through the partial index
        `ix_approval_requests_pending_requester` (migration 0009): the count reads at most `up_to`
        index entries, whatever else is pending."""
        with self._connection() as connection:
            params = {"of_action": action, "of_requester": requester, "up_to": up_to}
            return int(connection.scalar(PENDING_COUNT, params) or 0)

    def due_for_card(self, grace_seconds: int = 5, limit: int = 100) -> list[Request]:
        """Pending requests with no card, no live posting lease, older than `grace_seconds` at their
        level: a card whose posting died with its process (the sweep posts or finds it). Found
        through the partial index `ix_approval_requests_cards_due` (migration 0005), so the sweep
        does not read every pending request each second."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(
                    is_pending(),
                    ApprovalRequest.card_ts.is_(None),
                    no_live_card_lease(),
                    ApprovalRequest.level_started_at <= utcnow_plus(-grace_seconds),
                )
                .order_by(ApprovalRequest.level_started_at)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def due_for_timeout(self, limit: int = 100) -> list[Request]:
        """Pending requests whose current level has timed out by the database clock, oldest first
        (`sql.timeout_due`: not one whose card waits for its time, untried)."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(ApprovalRequest.status == Status.PENDING, timeout_due())
                .order_by(ApprovalRequest.expires_at)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def due_for_card_refresh(self, limit: int = 100) -> list[Request]:
        """Requests whose card Slack would not rewrite earlier and whose retry is due (database
        clock), oldest first; found through the partial index `ix_approval_requests_card_refresh_due`
        (migration 0007)."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(ApprovalRequest.card_refresh_due_at <= utcnow())
                .order_by(ApprovalRequest.card_refresh_due_at)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def due_for_reminder(self, limit: int = 100) -> list[Request]:
        """Pending requests with a card whose next reminder is due (database clock); found through
        the partial index `ix_approval_requests_reminders_due` (migration 0005)."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(
                    is_pending(),
                    ApprovalRequest.card_ts.is_not(None),
                    ApprovalRequest.next_reminder_at <= utcnow(),
                )
                .limit(limit)
            )
            return list(session.scalars(stmt))
