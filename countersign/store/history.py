"""The recorded history read back in bulk, and its one writer outside the state machine: placing a
demo request's times in the past (`backdate`), used by `countersign demo-history` only.

Times are UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, exists, select, update
from sqlalchemy.orm import Session

from .engine import WRITE
from .models import ApprovalRequest, AuditEvent, AuditSeal, Outcome, Vote, utcnow_plus

DEMO_PREFIX = "demo-"
"""The requester (and idempotency key) prefix of generated demo requests."""
DECISIONS = frozenset(outcome.value for outcome in Outcome)
"""The audit events that are a request's decision."""


def has_real_requests(engine: Engine) -> bool:
    """True when the database holds a request whose requester does not start with `DEMO_PREFIX`."""
    with Session(engine) as session:
        real = exists().where(~ApprovalRequest.requester.startswith(DEMO_PREFIX, autoescape=True))
        return bool(session.scalar(select(real)))


def backdate(engine: Engine, request_id: str, created_at: datetime, decided_at: datetime | None) -> None:
    """Move a just-made demo request into the past: it was created at `created_at` (its `requested`
    and `demo_data` audit events too) and everything after that happened at `decided_at` (UTC;
    None: still pending, only its creation moves). Deadlines and the grant keep their distance
    from the decision. Raises `ValueError` for a request that is not demo data (`DEMO_PREFIX`)."""
    with Session(engine.execution_options(**WRITE)) as session, session.begin():
        row = session.get(ApprovalRequest, request_id)
        if row is None or not row.requester.startswith(DEMO_PREFIX):
            raise ValueError(f"{request_id} is not a demo request; only demo data is moved in time")
        later = decided_at or created_at
        values = {"created_at": created_at, "level_started_at": created_at, "decided_at": decided_at}
        if row.grant_expires_at is not None and row.decided_at is not None:
            values["grant_expires_at"] = later + (row.grant_expires_at - row.decided_at)
        if row.expires_at is not None and decided_at is not None:
            values["expires_at"] = later
        session.execute(update(ApprovalRequest).where(ApprovalRequest.id == request_id).values(**values))
        first = AuditEvent.event.in_(("requested", "demo_data"))
        of_request = AuditEvent.request_id == request_id
        session.execute(update(AuditEvent).where(of_request, first).values(at=created_at))
        session.execute(update(AuditEvent).where(of_request, ~first).values(at=later))
        session.execute(update(Vote).where(Vote.request_id == request_id).values(at=later))


def make_due(engine: Engine, request_id: str) -> None:
    """Put a demo request's deadline a second in the past (database clock), so that the timeout's
    own transitions (`Store.expire`, `Store.escalate`) take it now. Raises `ValueError` for a
    request that is not demo data."""
    demo = ApprovalRequest.requester.startswith(DEMO_PREFIX, autoescape=True)
    with Session(engine.execution_options(**WRITE)) as session, session.begin():
        moved = session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == request_id, demo)
            .values(expires_at=utcnow_plus(-1))
            .returning(ApprovalRequest.id)
        ).first()
    if moved is None:
        raise ValueError(f"{request_id} is not a demo request; only demo data is moved in time")


EXPORT_BATCH = 2_000
"""Rows fetched at a time by `export` (a server-side cursor on PostgreSQL)."""


def export(
    engine: Engine, since: datetime, until: datetime, action: str | None = None
) -> Iterator[dict[str, Any]]:
    """The audit events with `since <= at < until` (UTC), of requests of action class `action` or
    of all, oldest id first, streamed `EXPORT_BATCH` rows at a time in constant memory: each
    `{id, at, request_id, action, event, actor, decision, edits, reason, policy_version, hash,
    detail}`, where `decision` is the event name for a decision event (`approved`, `rejected`,
    `expired`, else None), `edits` and `reason` come from its detail, `policy_version` from the
    request, and `hash` is its audit-chain link (None until sealed)."""
    stmt = (
        select(
            AuditEvent.id,
            AuditEvent.at,
            AuditEvent.request_id,
            AuditEvent.event,
            AuditEvent.actor,
            AuditEvent.detail,
            ApprovalRequest.action,
            ApprovalRequest.policy_version,
            AuditSeal.hash,
        )
        .outerjoin(ApprovalRequest, ApprovalRequest.id == AuditEvent.request_id)
        .outerjoin(AuditSeal, AuditSeal.event_id == AuditEvent.id)
        .where(AuditEvent.at >= since, AuditEvent.at < until)
        .order_by(AuditEvent.id)
        .execution_options(yield_per=EXPORT_BATCH)
    )
    if action is not None:
        stmt = stmt.where(ApprovalRequest.action == action)
    with Session(engine) as session, session.begin():
        for row in session.execute(stmt):
            detail = row.detail or {}
            yield {
                "id": row.id,
                "at": row.at,
                "request_id": row.request_id,
                "action": row.action,
                "event": row.event,
                "actor": row.actor,
                "decision": row.event if row.event in DECISIONS else None,
                "edits": detail.get("edits"),
                "reason": detail.get("reason"),
                "policy_version": row.policy_version,
                "hash": row.hash,
                "detail": detail,
            }


def recorded(engine: Engine, since: datetime, action: str | None = None) -> Iterator[ApprovalRequest]:
    """The requests created at or after `since` (UTC), of action class `action` or all, oldest
    first, streamed `EXPORT_BATCH` at a time (detached: read them, never write them back)."""
    stmt = (
        select(ApprovalRequest)
        .where(ApprovalRequest.created_at >= since)
        .order_by(ApprovalRequest.created_at)
    )
    if action is not None:
        stmt = stmt.where(ApprovalRequest.action == action)
    with Session(engine) as session, session.begin():
        for row in session.scalars(stmt.execution_options(yield_per=EXPORT_BATCH)):
            session.expunge(row)
            yield row
