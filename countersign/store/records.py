"""Writes that change no request's state: audit records, dead letters, the published mark of resume
events, and the intake outbox.

The **intake outbox** keeps every intake message an agent was given an id for (`accept`, written
by the agent's `request()` before it enqueues the intake job), until intake has turned it into a
request, a duplicate or a dead letter (each of which deletes it in its own transaction). So an id
handed to an agent survives Redis losing the intake job: the router's sweep enqueues it again
(`intake_waiting`, `relay.requeue_intake`), the transactional outbox pattern on the way in
(https://microservices.io/patterns/data/transactional-outbox.html).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from .models import DeadLetter, IntakeOutbox, OutboxEvent, utcnow, utcnow_plus
from .queries import Queries


class Records(Queries):
    """Audit records, dead letters, published marks and the intake outbox."""

    def accept(self, request_id: str, message: dict[str, Any]) -> None:
        """Keep an intake message (the `IntakeMessage` as JSON) until intake has taken it; once per
        request id (a repeated `request()` with the same key keeps the first)."""
        with self._write() as session:
            self._insert(session, IntakeOutbox, {"id": request_id, "message": message})

    def intake_waiting(self, older_than_seconds: int, limit: int = 100) -> list[IntakeOutbox]:
        """Intake messages accepted more than `older_than_seconds` ago (database clock) that intake
        has not taken yet, oldest first."""
        with self._read() as session:
            stmt = (
                select(IntakeOutbox)
                .where(IntakeOutbox.accepted_at <= utcnow_plus(-older_than_seconds))
                .order_by(IntakeOutbox.accepted_at)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def intake_message(self, request_id: str) -> IntakeOutbox | None:
        """The accepted intake message of `request_id` not taken by intake yet, or None."""
        with self._read() as session:
            return session.get(IntakeOutbox, request_id)

    def record(self, request_id: str, event: str, actor: str | None, **detail: Any) -> None:
        """Append an audit event that changes nothing else (a refused click, a lost job sent again)."""
        with self._write() as session:
            self._audit(session, request_id, event, actor, **detail)

    def record_duplicate(self, duplicate_id: str, request_id: str) -> None:
        """Note (audit `duplicate_of`) that `duplicate_id` was issued for the same key and payload as
        `request_id`, so that looking up either finds the one request."""
        with self._write() as session:
            self._audit(session, duplicate_id, "duplicate_of", None, original=request_id)
            intake_done(session, duplicate_id)

    def dead_letter(self, letter_id: str, reason: str, received: Any) -> bool:
        """Keep an intake message that cannot become a request, with its reason; audit `dead_lettered`.

        Idempotent on `letter_id` (a retried job does not add a second letter). True when new.
        """
        with self._write() as session:
            new = self._insert(session, DeadLetter, {"id": letter_id, "reason": reason, "received": received})
            intake_done(session, letter_id)
            if new:
                self._audit(session, letter_id, "dead_lettered", None, reason=reason)
        return new

    def mark_all_published(self, outbox_ids: Sequence[int]) -> int:
        """Mark outbox events published, each once, in one transaction; audit `resume_published` for
        each. Returns how many were not published before."""
        if not outbox_ids:
            return 0
        with self._write() as session:
            stmt = (
                update(OutboxEvent)
                .where(OutboxEvent.id.in_(outbox_ids), OutboxEvent.published_at.is_(None))
                .values(published_at=utcnow())
                .returning(OutboxEvent.request_id, OutboxEvent.job_id, OutboxEvent.queue)
            )
            rows = session.execute(stmt).all()
            for row in rows:
                self._audit(
                    session, row.request_id, "resume_published", None, job_id=row.job_id, queue=row.queue
                )
        return len(rows)


def intake_done(session: Session, request_id: str) -> None:
    """Intake has taken `request_id`'s message (in the caller's transaction): drop it from the outbox."""
    session.execute(delete(IntakeOutbox).where(IntakeOutbox.id == request_id))
