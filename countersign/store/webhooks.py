"""The delivery state of resume webhooks, kept on their outbox rows: which are due, the claim of one
attempt (a lease), and what the attempt's answer leaves (delivered, tried again later, or
dead-lettered).

An attempt is claimed by one conditional UPDATE that pushes `next_attempt_at` out by the lease and
counts it (`attempts`), as reminders are claimed (`Deliveries`): two router workers' sweeps never
start the same attempt, and one whose process died is started again by any sweep once the lease
runs out. Its result is recorded only while `attempts` is still the number it claimed, so a late
answer never overwrites a newer attempt's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import select, update

from .models import OutboxEvent, ResumeProblem, utcnow, utcnow_plus
from .records import Records, not_run
from .rows import Event
from .transaction import Writer


class WebhookAttempt(NamedTuple):
    """One claimed attempt: the outbox row as claimed (`event.attempts` counts this attempt, and
    `event.problem` is the problem noted before it), and whether it started after the give-up
    time (`last`: if it fails, the webhook is dead-lettered)."""

    event: OutboxEvent
    last: bool


class WebhookDeliveries(Records):
    """Claims and results of webhook attempts (`router/webhooks.py` makes them)."""

    def claim_webhooks(self, limit: int, lease_seconds: int, give_up_seconds: int) -> list[WebhookAttempt]:
        """Claim up to `limit` webhook attempts that are due (database clock), oldest due first:
        each is held `lease_seconds` and counted in `attempts`. An attempt started
        `give_up_seconds` or more after the decision is its `last`. Found through the partial
        index `ix_outbox_webhooks_due` (migration 0011)."""
        with self._write() as session:
            due = (
                select(OutboxEvent.id)
                .where(OutboxEvent.next_attempt_at <= utcnow())
                .order_by(OutboxEvent.next_attempt_at)
                .limit(limit)
            )
            ids = list(session.scalars(due))
            if not ids:
                return []
            last = (OutboxEvent.created_at <= utcnow_plus(-give_up_seconds)).label("last")
            stmt = (
                update(OutboxEvent)
                .where(OutboxEvent.id.in_(ids), OutboxEvent.next_attempt_at <= utcnow())
                .values(next_attempt_at=utcnow_plus(lease_seconds), attempts=OutboxEvent.attempts + 1)
                .returning(OutboxEvent, last)
                .execution_options(synchronize_session=False)
            )
            return [WebhookAttempt(event, bool(late)) for event, late in session.execute(stmt)]

    def webhook_delivered(self, event: OutboxEvent, actor: str, **detail: Any) -> bool:
        """Record that the claimed attempt `event` was delivered (a 2xx): `published_at` now, nothing
        more due, a noted problem cleared; audit `webhook_delivered` by `actor` with `detail`. False,
        changing nothing, when a later attempt has claimed the row since."""
        with self._write() as session:
            stmt = (
                update(OutboxEvent)
                .where(*_still_claimed(event))
                .values(published_at=utcnow(), next_attempt_at=None, problem=None)
                .returning(OutboxEvent.id)
            )
            if session.execute(stmt).first() is None:
                return False
            self._audit(session, event.request_id, "webhook_delivered", actor, **detail)
        return True

    def webhook_failed(
        self, event: OutboxEvent, retry_in: int | None, problem: ResumeProblem, actor: str, **detail: Any
    ) -> bool:
        """Record that the claimed attempt `event` failed: the next attempt `retry_in` seconds from
        now (database clock), or, with `retry_in` None, none (dead-lettered); `problem` noted on the
        row unless the agent has recorded an execution. Audits `webhook_failed` by `actor` with
        `detail` and `next_attempt_at` (ISO 8601 UTC, or None), then for a dead letter
        `webhook_dead_lettered` with the fields of `problem`. False, changing nothing, when a later
        attempt has claimed the row since."""
        due = None if retry_in is None else utcnow_plus(retry_in)
        with self._write() as session:
            stmt = (
                update(OutboxEvent)
                .where(*_still_claimed(event))
                .values(next_attempt_at=due)
                .returning(OutboxEvent.next_attempt_at)
            )
            found = session.execute(stmt).first()
            if found is None:
                return False
            session.execute(
                update(OutboxEvent).where(OutboxEvent.id == event.id, not_run()).values(problem=problem)
            )
            next_at: datetime | None = found.next_attempt_at
            when = next_at.isoformat(timespec="microseconds").replace("+00:00", "Z") if next_at else None
            self._audit(session, event.request_id, "webhook_failed", actor, **detail, next_attempt_at=when)
            if retry_in is None:
                facts = {key: value for key, value in problem.items() if key != "event"}
                self._audit(session, event.request_id, "webhook_dead_lettered", actor, **facts)
        return True


def due_now(session: Writer, events: Iterable[Event]) -> None:
    """Make the first attempt of the webhook events among just-inserted `events` due now (database
    clock), in the caller's transaction; nothing for RQ events."""
    webhooks = [event.id for event in events if event.webhook is not None]
    if webhooks:
        session.execute(
            update(OutboxEvent).where(OutboxEvent.id.in_(webhooks)).values(next_attempt_at=utcnow())
        )


def _still_claimed(event: OutboxEvent) -> tuple[Any, ...]:
    """The row of the claimed attempt `event`, as long as no later attempt has claimed it."""
    return (OutboxEvent.id == event.id, OutboxEvent.attempts == event.attempts)
