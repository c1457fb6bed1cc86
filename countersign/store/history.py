"""The recorded history read back in bulk, and its one writer outside the state machine: placing a
demo request's times in the past (`backdate`), used by `countersign demo-history` only.

Times are UTC.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, exists, select, update
from sqlalchemy.orm import Session

from .engine import WRITE
from .models import ApprovalRequest, AuditEvent, Vote, utcnow_plus

DEMO_PREFIX = "demo-"
"""The requester (and idempotency key) prefix of generated demo requests."""


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
