"""Writes that change no request's state: audit records, dead letters, the published mark of resume
events and the problems of those the agent has not run, and the intake outbox.

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
from sqlalchemy.sql.dml import Delete

from .models import (
    ApprovalRequest,
    DeadLetter,
    IntakeOutbox,
    OutboxEvent,
    OutcomeUnknown,
    ResumeFailed,
    ResumeNotTaken,
    ResumeProblem,
    utcnow,
    utcnow_plus,
)
from .queries import Queries
from .statements import accepted


class Records(Queries):
    """Audit records, dead letters, published marks and problems of resume events, and the intake
    outbox."""

    def accept(self, request_id: str, message: dict[str, Any]) -> None:
        """Keep an intake message (the `IntakeMessage` as JSON) until intake has taken it; once per
        request id (a repeated `request()` with the same key keeps the first)."""
        with self._connection(write=True) as connection:
            stmt = accepted(connection.dialect.name)
            connection.execute(stmt, {"new_id": request_id, "new_message": message})

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
        """Mark outbox events published (`published_at`, database clock), each once, in one
        transaction. Their `resume_published` audit event was written with the decision. Returns
        how many were not published before."""
        if not outbox_ids:
            return 0
        with self._write() as session:
            stmt = (
                update(OutboxEvent)
                .where(OutboxEvent.id.in_(outbox_ids), OutboxEvent.published_at.is_(None))
                .values(published_at=utcnow())
                .returning(OutboxEvent.id)
            )
            return len(session.execute(stmt).all())

    def resume_failed(self, request_id: str, error: str, retries_left: int, actor: str) -> bool:
        """Note that the request's resume job raised before the agent recorded anything (`error`:
        `"<exception type>: <message>"`; RQ runs it `retries_left` more times): the outbox row's
        `problem` (`ResumeFailed`) and the audit event `resume_failed` by `actor`, in one
        transaction. Only while no execution is recorded (an action that raised is the agent's
        own `failed` outcome). True when noted."""
        problem: ResumeFailed = {"event": "resume_failed", "error": error, "retries_left": retries_left}
        with self._write() as session:
            return bool(self._note(session, (OutboxEvent.request_id == request_id,), problem, actor))

    def resumes_not_taken(self, waiting: dict[str, str], waited_seconds: int, actor: str) -> list[str]:
        """Note, of the resume jobs `waiting` on their queues (`{request id: queue}`), those
        published at least `waited_seconds` ago (database clock) with no problem noted and no
        execution recorded: the outbox row's `problem` (`ResumeNotTaken`) and the audit event
        `resume_not_taken` by `actor`, all in one transaction. Returns their request ids."""
        noted: list[str] = []
        if not waiting:
            return noted
        with self._write() as session:
            for request_id, queue in waiting.items():
                problem: ResumeNotTaken = {
                    "event": "resume_not_taken",
                    "queue": queue,
                    "waited_seconds": waited_seconds,
                }
                where = (
                    OutboxEvent.request_id == request_id,
                    OutboxEvent.problem.is_(None),
                    OutboxEvent.published_at <= utcnow_plus(-waited_seconds),
                )
                noted += self._note(session, where, problem, actor)
        return noted

    def resumes_taken(self, request_ids: Sequence[str], actor: str) -> list[str]:
        """Clear the noted problem of these requests' resume jobs, which a worker has run to the end
        since; audit `resume_taken` by `actor` for each. Returns the request ids cleared now."""
        if not request_ids:
            return []
        with self._write() as session:
            stmt = (
                update(OutboxEvent)
                .where(OutboxEvent.request_id.in_(request_ids), OutboxEvent.problem.is_not(None))
                .values(problem=None)
                .returning(OutboxEvent.request_id, OutboxEvent.job_id)
            )
            cleared = session.execute(stmt).all()
            for row in cleared:
                self._audit(session, row.request_id, "resume_taken", actor, job_id=row.job_id)
        return [row.request_id for row in cleared]

    def _note(
        self, session: Session, where: tuple[Any, ...], problem: ResumeProblem, actor: str
    ) -> list[str]:
        """Set `problem` on the outbox rows `where` holds whose request has no execution recorded,
        and audit it; the request ids noted."""
        stmt = (
            update(OutboxEvent)
            .where(*where, not_run())
            .values(problem=problem)
            .returning(OutboxEvent.request_id, OutboxEvent.job_id)
        )
        rows = session.execute(stmt).all()
        detail = {key: value for key, value in problem.items() if key != "event"}
        for row in rows:
            self._audit(session, row.request_id, problem["event"], actor, job_id=row.job_id, **detail)
        return [row.request_id for row in rows]


def not_run() -> Any:
    """The outbox row's request has no execution recorded (the agent has not claimed or reported
    it): a condition for noting a problem on the row."""
    return (
        select(ApprovalRequest.id)
        .where(ApprovalRequest.id == OutboxEvent.request_id, ApprovalRequest.execution.is_(None))
        .exists()
    )


def intake_done(session: Session, request_id: str) -> None:
    """Intake has taken `request_id`'s message (in the caller's transaction): drop it from the outbox."""
    session.execute(intake_taken([request_id]))


def intake_taken(request_ids: Any) -> Delete:
    """The DELETE of the intake outbox's messages of `request_ids` (a list, or a subquery of ids)."""
    return delete(IntakeOutbox).where(IntakeOutbox.id.in_(request_ids))


def outcome_unknown(session: Session, request: ApprovalRequest) -> dict[str, str]:
    """Note on `request`'s resume event that its run started and never reported an outcome
    (`OutcomeUnknown`, in the caller's transaction), replacing any other problem noted; the
    problem's detail (`started_at`) for the refusal's audit event."""
    assert request.executed_at is not None  # set with `started`, by the claim
    started_at = request.executed_at.isoformat(timespec="microseconds").replace("+00:00", "Z")
    problem = OutcomeUnknown(event="outcome_unknown", started_at=started_at)
    session.execute(update(OutboxEvent).where(OutboxEvent.request_id == request.id).values(problem=problem))
    return {"started_at": problem["started_at"]}
