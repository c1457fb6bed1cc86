"""The SQL pieces the store's queries and transitions share: conditions on a request's state and the
one conditional UPDATE every transition is made of. Times are the database's clock."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, literal, or_, select, tuple_, type_coerce, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from .models import (
    ApprovalRequest,
    Decider,
    Edit,
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
from .rules import Rules


def verdict(
    outcome: Outcome,
    decided_by: list[Decider],
    via: Via,
    reason: str | None,
    grant_ttl: int,
    approved_payload: dict[str, Any] | None = None,
    edits: list[Edit] | None = None,
    timeout_result: TimeoutResult | None = None,
) -> dict[str, Any]:
    """The column values of a decision. What may run (`approved_payload`, and a grant expiring
    `grant_ttl` seconds after the database's now) is set for approvals and for timeouts that
    `allow`."""
    values: dict[str, Any] = {
        "status": Status(outcome),
        "decided_by": decided_by,
        "decided_via": via,
        "decision_reason": reason,
        "decided_at": utcnow(),
        "edits": edits or [],
        "timeout_result": timeout_result,
    }
    if may_run(outcome, timeout_result):
        values["approved_payload"] = (
            approved_payload if approved_payload is not None else ApprovalRequest.payload
        )
        values["grant_expires_at"] = utcnow_plus(grant_ttl)
    return values


def expire_due(
    session: Session, due: list[ApprovalRequest], asked: TimeoutResult, grant_ttl: int
) -> list[ApprovalRequest]:
    """One conditional UPDATE ... RETURNING expiring `due`: each still pending at the level it was
    read at and past its `expires_at` (database clock). The timeout decides `asked`, but `allow` only
    for a row with a card (`card_ts`, as the UPDATE finds it; the others are denied), with a grant
    valid `grant_ttl` seconds; a row with a card is due for its rewrite now (`card_refresh_due_at`).
    Returns the rows expired (not those something else got to first)."""
    shown = ApprovalRequest.card_ts.is_not(None)
    values = verdict(Outcome.EXPIRED, [], Via.TIMEOUT, None, grant_ttl, timeout_result=TimeoutResult.DENY)
    if asked == TimeoutResult.ALLOW:  # what `allow` sets beyond `deny`: the grant, the payload to run
        allowed = verdict(
            Outcome.EXPIRED, [], Via.TIMEOUT, None, grant_ttl, timeout_result=TimeoutResult.ALLOW
        )
        for column in ("timeout_result", "approved_payload", "grant_expires_at"):
            values[column] = case((shown, allowed[column]), else_=values.get(column))
    where = (
        tuple_(ApprovalRequest.id, ApprovalRequest.level).in_([(row.id, row.level) for row in due]),
        ApprovalRequest.status == Status.PENDING,
        ApprovalRequest.expires_at <= utcnow(),
    )
    stmt = (
        update(ApprovalRequest)
        .where(*where)
        .values(**values, card_refresh_due_at=case((shown, utcnow())))
        .returning(ApprovalRequest)
        .execution_options(synchronize_session=False)
    )
    return list(session.scalars(stmt))


def update_request(session: Session, where: tuple[Any, ...], **values: Any) -> ApprovalRequest | None:
    """One conditional UPDATE of a request: the updated row, or None when `where` did not hold
    (someone else got there first)."""
    stmt = update(ApprovalRequest).where(*where).values(**values).returning(ApprovalRequest)
    return session.scalars(stmt).one_or_none()


def execution_update(session: Session, request_id: str, *where: Any, **values: Any) -> ApprovalRequest | None:
    """`update_request` of request `request_id` (and `where`) for the agent's worker claiming or
    reporting its execution: the worker has the decision, so a problem noted on the resume event is
    cleared (`resume_taken`) in the same transaction, only when the UPDATE's RETURNING says there is
    one (no second statement otherwise)."""
    noted = select(OutboxEvent.id).where(
        OutboxEvent.request_id == request_id, OutboxEvent.problem.is_not(None)
    )
    stmt = (
        update(ApprovalRequest)
        .where(ApprovalRequest.id == request_id, *where)
        .values(**values)
        .returning(ApprovalRequest, noted.exists())
    )
    found = session.execute(stmt).one_or_none()
    if found is None:
        return None
    row, problem = found
    if problem:
        resume_taken(session, request_id)
    return row


def resume_taken(session: Session, request_id: str) -> None:
    """The agent's worker has the request's decision (it claimed or reported the execution): clear
    the problem noted on its resume event, if any (in the caller's transaction)."""
    session.execute(
        update(OutboxEvent)
        .where(OutboxEvent.request_id == request_id, OutboxEvent.problem.is_not(None))
        .values(problem=None)
    )


def is_pending() -> Any:
    """`status = 'pending'` with the literal in the SQL text, not a bound parameter, so that the
    partial indexes `WHERE status = 'pending'` (migration 0005) match it on both backends, also in
    a prepared statement's generic plan."""
    return ApprovalRequest.status == literal(Status.PENDING.value, literal_execute=True)


def approver_is(dialect: str, user_id: str) -> Any:
    """The request's current `approvers` (a JSON array of Slack user ids) include `user_id`."""
    if dialect == "postgresql":
        return type_coerce(ApprovalRequest.approvers, JSONB).contains([user_id])
    each = func.json_each(ApprovalRequest.approvers).table_valued("value")
    return select(each.c.value).where(each.c.value == user_id).exists()


def not_timed_out() -> Any:
    """The request has no deadline, or it has not passed (database clock)."""
    return or_(ApprovalRequest.expires_at.is_(None), ApprovalRequest.expires_at > utcnow())


def no_live_card_lease() -> Any:
    """Nobody holds an unexpired lease on posting the request's card (database clock)."""
    return or_(ApprovalRequest.card_lease_until.is_(None), ApprovalRequest.card_lease_until <= utcnow())


def first_reminder(rules: Rules) -> utcnow_plus | None:
    """When the first reminder of a level that starts now is due, or None without reminders."""
    offsets = rules.reminders_seconds
    return utcnow_plus(offsets[0]) if offsets else None


def deadline(rules: Rules, level: int, after_seconds: int = 0) -> utcnow_plus | None:
    """When escalation `level` times out if its clock starts `after_seconds` from the database's
    now, or None for a level without a timeout."""
    timeout = rules.level(level).timeout_seconds
    return utcnow_plus(after_seconds + timeout) if timeout else None


def level_clock(rules: Rules, level: int) -> dict[str, Any]:
    """The columns of escalation `level`'s clock started now (database clock): its deadline
    (`expires_at`), `level_started_at`, and its first reminder, none sent yet."""
    return {
        "expires_at": deadline(rules, level),
        "level_started_at": utcnow(),
        "next_reminder_at": first_reminder(rules),
        "reminders_sent": 0,
    }


def why_not_executable(request: ApprovalRequest | None) -> NotExecutableWhy:
    """Why `Store.claim_execution` found nothing to claim."""
    if request is None:
        return "unknown_request"
    if request.approved_payload is None:
        return "not_approved"
    return "already_executed" if request.execution is not None else "grant_expired"
