"""Where a request's card and reminders stand in Slack: posting leases, the card's channel and `ts`,
card rewrites still due, and reminders claimed and sent; and the level's clock, which runs from its
card (`schedule_card` moves the deadline behind a busy channel, `attach_card` starts it again).

None of this changes a request's status (the state machine is `state.py`); each write is a
conditional UPDATE or a lease, so several workers' sweeps never post one card or reminder twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from .models import ApprovalRequest, AuditEvent, Status, utcnow, utcnow_plus
from .records import Records
from .rows import Request, RequestRow
from .sql import (
    REQUESTS,
    audit_row,
    changed_request,
    deadline,
    no_live_card_lease,
    update_request,
)
from .statements import REFRESH_LATER, attach

CARD_VERSIONS = ("card_posted", "card_updated")
"""The audit events that record a version of a card: its `ts` and what it showed (`text`,
`blocks_sha256`)."""
CARD_LEASE_SECONDS = 60
"""How long a card's posting lease lasts (`claim_card`, `Store.create`): a poster that died holding
it is replaced by the card sweep this long after its claim."""


class Deliveries(Records):
    """Transactions on the delivery of cards and reminders. Safe to share between threads."""

    def claim_card(self, request_id: str, lease_seconds: int = CARD_LEASE_SECONDS) -> RequestRow | None:
        """Take the right to post a pending request's card for `lease_seconds` (database clock).

        None while another process holds an unexpired lease, or once the card exists. The returned
        request's `card_attempts` counts the claims: above 1, an earlier attempt may have posted
        the card and died before `attach_card`, so look for it before posting again.
        """
        with self._write() as session:
            return update_request(
                session,
                (
                    ApprovalRequest.id == request_id,
                    ApprovalRequest.status == Status.PENDING,
                    ApprovalRequest.card_ts.is_(None),
                    no_live_card_lease(),
                ),
                card_lease_until=utcnow_plus(lease_seconds),
                card_attempts=ApprovalRequest.card_attempts + 1,
            )

    def defer_card(self, request_id: str, seconds: int) -> None:
        """Keep everyone from posting the card for `seconds` (Slack refused it or asked to wait)."""
        with self._write() as session:
            session.execute(
                update(ApprovalRequest)
                .where(ApprovalRequest.id == request_id, ApprovalRequest.card_ts.is_(None))
                .values(card_lease_until=utcnow_plus(seconds))
            )

    def schedule_card(self, request: Request, seconds: int, unclaimed: bool = False) -> None:
        """The card of `request`'s level waits `seconds` for its time in its channel's pace: nobody
        posts it before then (the posting lease), and the level's deadline moves to that time plus
        its timeout (database clock), so a card behind a backlog never loses its reviewers' time;
        until a post of it is tried that deadline does not time the level out (`sql.CLOCK_RUNNING`:
        the router may be down past it).
        `unclaimed`: the caller holds the lease `create(..., card_lease=True)` took and posted
        nothing, so that claim is not counted (`card_attempts`: the next claim looks for no card).
        Nothing changes once the card is posted, the request decided or moved to another level."""
        pending_without_card = (
            ApprovalRequest.id == request.id,
            ApprovalRequest.status == Status.PENDING,
            ApprovalRequest.card_ts.is_(None),
            ApprovalRequest.level == request.level,
        )
        clock = deadline(request.rules, request.level, seconds)
        attempts = {"card_attempts": ApprovalRequest.card_attempts - 1} if unclaimed else {}
        with self._write() as session:
            update_request(
                session,
                pending_without_card,
                card_lease_until=utcnow_plus(seconds),
                expires_at=clock,
                **attempts,
            )

    def refresh_card_later(self, request_id: str, seconds: int) -> None:
        """Slack would not rewrite the card now: have the card sweep try again in `seconds`
        (database clock), and on each later tick until it succeeds (`card_refreshed`)."""
        with self._connection(write=True) as connection:
            connection.execute(REFRESH_LATER, {"for_request": request_id, "after_seconds": seconds})

    def card_refreshed(self, request_id: str, moved_to: tuple[str, str] | None = None) -> None:
        """The card now tells the truth: nothing more is due. With `moved_to` (`(channel, ts)`), the
        old card vanished and a status message stands in for it: later rewrites edit that message,
        so a vanished card gets one status message, not one a refresh (audited `card_replaced`)."""
        moved = {"channel": moved_to[0], "card_ts": moved_to[1]} if moved_to else {}
        stmt = update(REQUESTS).where(REQUESTS.c.id == request_id).values(card_refresh_due_at=None, **moved)
        if not moved_to:
            with self._connection(write=True) as connection:
                connection.execute(stmt)
            return
        with self._write() as session:  # its audit event at commit, in the same transaction
            session.execute(stmt)
            self._audit(session, request_id, "card_replaced", None, channel=moved_to[0], ts=moved_to[1])

    def reroute(
        self, request_id: str, channel: str, level: int, why: str, **detail: Any
    ) -> RequestRow | None:
        """Send a pending request's card to `channel` instead (its original channel refused it);
        audited as `delivery_failed`. None if the request has a card already or is decided."""
        with self._write() as session:
            return update_request(
                session,
                (
                    ApprovalRequest.id == request_id,
                    ApprovalRequest.status == Status.PENDING,
                    ApprovalRequest.card_ts.is_(None),
                    ApprovalRequest.level == level,
                ),
                audit_row(request_id, "delivery_failed", None, why=why, to_channel=channel, **detail),
                channel=channel,
            )

    def attach_card(
        self, request: Request, channel: str, ts: str, shown: dict[str, Any] | None = None
    ) -> RequestRow | None:
        """Record where the card of `request`'s escalation level is, once: the `channel` Slack
        answered (the conversation's id, which for a card sent to a user id is their DM's `D…` id
        and replaces the user id) and its `ts`; audit `card_posted`, with what reviewers are `shown`
        (the card's `text` and `blocks_sha256`) when given. For a request still pending the
        level's clock starts again now (database clock), in the same UPDATE, as reviewers can see
        the card from now on: its deadline is the level's timeout from now (from `request.rules`),
        and its reminders count from now. Returns the request as stored now (it may have been
        decided while its card was posted), or None if it had a card, or moved on to another level
        meanwhile."""
        rules = request.rules
        timeout, offsets = rules.level(request.level).timeout_seconds, rules.reminders_seconds
        posted = audit_row(request.id, "card_posted", None, ts=ts, **(shown or {}))
        params = {"for_request": request.id, "at_level": request.level, "new_channel": channel, "new_ts": ts}
        params |= {"timeout_seconds": timeout or 0, "reminder_seconds": offsets[0] if offsets else 0}
        with self._connection(write=True) as connection:
            found = changed_request(connection, attach(bool(timeout), bool(offsets)), [posted], params=params)
        return None if found is None else found[0]

    def card_rewritten(self, request_id: str, ts: str, shown: dict[str, Any], why: str) -> bool:
        """Audit `card_updated` (`{ts, why, text, blocks_sha256}`) for the card at `ts` of a pending
        request, just rewritten to show `shown` (`{"text", "blocks_sha256"}`) because of `why`
        (`counted`: a vote toward the quorum; `escalated`: the request moved on), unless the last
        version recorded of that card (`CARD_VERSIONS` with this `ts`) shows the same: so the trail
        holds each version a reviewer could have seen, once. True when recorded. One read of the
        request's card events and, when changed, one INSERT."""
        with self._write() as session:
            stmt = (
                select(AuditEvent.detail)
                .where(AuditEvent.request_id == request_id, AuditEvent.event.in_(CARD_VERSIONS))
                .order_by(AuditEvent.id.desc())
            )
            last = next((d for d in session.scalars(stmt) if d.get("ts") == ts), None)
            if last is not None and all(last.get(key) == shown[key] for key in ("text", "blocks_sha256")):
                return False
            self._audit(session, request_id, "card_updated", None, ts=ts, why=why, **shown)
        return True

    def claim_reminder(self, request: Request, lease_seconds: int = 60) -> bool:
        """Take the request's due reminder for `lease_seconds` (once, even with two sweepers): its
        due time moves that far on, so if the reminder is not posted and marked (`reminder_sent`)
        by then, a later sweep takes it again."""
        with self._write() as session:
            where = (*self._same_reminder(request), ApprovalRequest.next_reminder_at <= utcnow())
            return update_request(session, where, next_reminder_at=utcnow_plus(lease_seconds)) is not None

    def reminder_sent(self, request: Request, failed: str | None = None) -> bool:
        """Mark the claimed reminder posted (audit `reminded`), or given up for good with Slack's
        error `failed` (audit `reminder_failed`), and schedule the one after. False if the request
        moved on meanwhile (decided, escalated, or the reminder marked by another sweeper)."""
        offsets = request.rules.reminders_seconds
        sent = request.reminders_sent + 1
        later = (
            request.level_started_at + timedelta(seconds=offsets[sent])
            if sent < len(offsets) and request.level_started_at is not None
            else None
        )
        event, detail = ("reminder_failed", {"why": failed}) if failed else ("reminded", {})
        audit = audit_row(request.id, event, None, level=request.level, reminder=sent, **detail)
        with self._write() as session:
            row = update_request(
                session, self._same_reminder(request), audit, reminders_sent=sent, next_reminder_at=later
            )
        return row is not None

    @staticmethod
    def _same_reminder(request: Request) -> tuple[Any, ...]:
        """The request is still pending at the same level, with the same reminders sent."""
        return (
            ApprovalRequest.id == request.id,
            ApprovalRequest.status == Status.PENDING,
            ApprovalRequest.level == request.level,
            ApprovalRequest.reminders_sent == request.reminders_sent,
        )
