"""The approval request state machine, the audit log, the outbox and dead letters.

This is the only module that changes a request's state. Every transition is one conditional UPDATE
(`... WHERE status = 'pending'`), so when two reviewers click at once the first writer wins and the
other sees zero rows updated; the decision, its audit event and its outbox row commit together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, literal, or_, select, type_coerce, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from .engine import WRITE, create_db_engine
from .models import ApprovalRequest, AuditEvent, DeadLetter, OutboxEvent, Vote, utcnow, utcnow_plus

PENDING, APPROVED, REJECTED, EXPIRED = "pending", "approved", "rejected", "expired"
OUTCOMES = (APPROVED, REJECTED)
STARTED, EXECUTED, FAILED = "started", "executed", "failed"


class ExecutionRefused(Exception):
    """An approved action may not run (again): `why` is `unknown_request` | `not_approved` |
    `already_executed` | `grant_expired` | `bad_signature` | `payload_mismatch`."""

    def __init__(self, request_id: str, why: str) -> None:
        super().__init__(f"request {request_id}: execution refused ({why})")
        self.request_id = request_id
        self.why = why


@dataclass(frozen=True)
class Decided:
    """`Store.decide` won: the request is now in `request.status`; `event` is its resume event."""

    request: ApprovalRequest
    event: OutboxEvent


@dataclass(frozen=True)
class Counted:
    """`Store.vote` counted the vote but the quorum is not reached yet: `approvals` so far
    (`[{slack_user_id, name}]`); `repeated` when this approver had already voted."""

    request: ApprovalRequest
    approvals: list[dict[str, str]]
    repeated: bool = False


@dataclass(frozen=True)
class TimedOut:
    """A reviewer acted after the request's deadline: nothing changed; the policy's timeout decides."""

    request: ApprovalRequest


@dataclass(frozen=True)
class Refused:
    """`Store.vote` refused the voter (the caller's `refuse` check, on the locked row): nothing
    changed but a `refused` audit event; `why` is its refusal code (e.g. `not_an_approver`)."""

    request: ApprovalRequest
    why: str


@dataclass(frozen=True)
class AlreadyDecided:
    """`Store.decide` lost: the request had already left `pending`; `request` shows who decided what."""

    request: ApprovalRequest


class Store:
    """Transactions over the countersign database. Safe to share between threads.

    Objects returned are detached snapshots: read them, never write them back.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**WRITE)

    @classmethod
    def from_url(cls, url: str) -> Store:
        """A `Store` on `url` (see `create_db_engine`); the schema must already be migrated."""
        return cls(create_db_engine(url))

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._writer, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    def _insert(self, session: Session, model: type, values: dict[str, Any]) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING; True when a row was inserted."""
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(model).values(**values).on_conflict_do_nothing().returning(literal(1))
        return session.execute(stmt).first() is not None

    @staticmethod
    def _audit(session: Session, request_id: str, event: str, actor: str | None, **detail: Any) -> None:
        session.add(AuditEvent(request_id=request_id, event=event, actor=actor, detail=detail))

    def create(self, values: dict[str, Any]) -> tuple[ApprovalRequest, bool]:
        """Insert a pending request unless its id or idempotency key exists; audit `requested`.

        `values` holds the `ApprovalRequest` columns except status, card and decision; the clock
        (`expires_at`, first reminder) starts now, by the database, from `rules`. Returns
        `(request, created)`: the stored row, which for `created=False` is the earlier request with
        the same idempotency key (compare `payload_sha256` to tell a repeat from a conflict).
        """
        rules = values.get("rules") or {}
        timeout = (rules.get("levels") or [{}])[0].get("timeout")
        clock = {
            "expires_at": utcnow_plus(timeout) if timeout else None,
            "level_started_at": utcnow(),
            "next_reminder_at": _first_reminder(rules),
        }
        with self._write() as session:
            created = self._insert(session, ApprovalRequest, {**values, **clock, "status": PENDING})
            if created:
                self._audit(session, values["id"], "requested", values["requester"], action=values["action"])
            row = session.scalars(
                select(ApprovalRequest).where(ApprovalRequest.idempotency_key == values["idempotency_key"])
            ).one()
        return row, created

    def claim_card(self, request_id: str, lease_seconds: int = 60) -> ApprovalRequest | None:
        """Take the right to post a pending request's card for `lease_seconds` (database clock).

        None while another process holds an unexpired lease, or once the card exists. The returned
        request's `card_attempts` counts the claims: above 1, an earlier attempt may have posted
        the card and died before `attach_card`, so look for it before posting again.
        """
        with self._write() as session:
            return _update_request(
                session,
                (
                    ApprovalRequest.id == request_id,
                    ApprovalRequest.status == PENDING,
                    ApprovalRequest.card_ts.is_(None),
                    _no_live_card_lease(),
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

    def reroute(
        self, request_id: str, channel: str, level: int, why: str, **detail: Any
    ) -> ApprovalRequest | None:
        """Send a pending request's card to `channel` instead (its original channel refused it);
        audited as `delivery_failed`. None if the request has a card already or is decided."""
        with self._write() as session:
            row = _update_request(
                session,
                (
                    ApprovalRequest.id == request_id,
                    ApprovalRequest.status == PENDING,
                    ApprovalRequest.card_ts.is_(None),
                    ApprovalRequest.level == level,
                ),
                channel=channel,
            )
            if row is not None:
                self._audit(
                    session, request_id, "delivery_failed", None, why=why, to_channel=channel, **detail
                )
        return row

    def due_for_card(self, grace_seconds: int = 5, limit: int = 100) -> list[ApprovalRequest]:
        """Pending requests with no card, no live posting lease, older than `grace_seconds` at their
        level: a card whose posting died with its process (the sweep posts or finds it). Found
        through the partial index `ix_approval_requests_cards_due` (migration 0005), so the sweep
        does not read every pending request each second."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(
                    _is_pending(),
                    ApprovalRequest.card_ts.is_(None),
                    _no_live_card_lease(),
                    ApprovalRequest.level_started_at <= utcnow_plus(-grace_seconds),
                )
                .order_by(ApprovalRequest.level_started_at)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def attach_card(self, request_id: str, ts: str, level: int = 0) -> bool:
        """Record the Slack `ts` of the request's card at escalation `level`, once; audit
        `card_posted`. False if it had one, or the request moved on to another level meanwhile."""
        with self._write() as session:
            where = (
                ApprovalRequest.id == request_id,
                ApprovalRequest.card_ts.is_(None),
                ApprovalRequest.level == level,
            )
            attached = _update_request(session, where, card_ts=ts) is not None
            if attached:
                self._audit(session, request_id, "card_posted", None, ts=ts)
        return attached

    def decide(
        self,
        request_id: str,
        outcome: str,
        decided_by: list[dict[str, str]],
        via: str,
        body: Callable[[ApprovalRequest], dict[str, Any]],
        *,
        reason: str | None = None,
        approved_payload: dict[str, Any] | None = None,
        edits: list[dict[str, Any]] | None = None,
        grant_ttl: int = 900,
    ) -> Decided | AlreadyDecided | TimedOut:
        """Move a pending request to `outcome` (`approved` | `rejected`), first writer wins.

        In one transaction: the conditional UPDATE, the audit event named after the outcome, and the
        outbox row whose body is `body(decided request)` (the resume decision). `decided_by` is
        `[{slack_user_id, name}]`; `via` is `slack` | `policy` | `timeout`. An approval may carry
        `approved_payload` (the reviewer's edit; default: the frozen payload) with its `edits`
        diff, and its grant expires `grant_ttl` seconds after the database's now. Raises
        `LookupError` for an unknown request id.
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        values = _verdict(outcome, decided_by, via, reason, grant_ttl, approved_payload, edits)
        with self._write() as session:
            on_time = () if via != "slack" else (_not_timed_out(),)
            decided = self._decide_in(session, request_id, values, body, *on_time)
            if decided is not None:
                return decided
            request = self._one(session, request_id)
            return TimedOut(request) if request.status == PENDING else AlreadyDecided(request)

    def _decide_in(
        self,
        session: Session,
        request_id: str,
        values: dict[str, Any],
        body: Callable[[ApprovalRequest], dict[str, Any]],
        *where: Any,
        **detail: Any,
    ) -> Decided | None:
        """The conditional UPDATE out of `pending` (plus `where`), its audit event and its outbox row."""
        row = _update_request(
            session, (ApprovalRequest.id == request_id, ApprovalRequest.status == PENDING, *where), **values
        )
        if row is None:
            return None
        actor = values["decided_by"][0]["slack_user_id"] if values["decided_by"] else None
        self._audit(
            session,
            request_id,
            values["status"],
            actor,
            via=values["decided_via"],
            reason=values["decision_reason"],
            edits=values["edits"],
            **detail,
        )
        event = OutboxEvent(
            request_id=request_id,
            queue=row.resume_queue,
            func=row.resume_func,
            job_id=resume_job_id(request_id),
            body=body(row),
        )
        session.add(event)
        session.flush()
        return Decided(row, event)

    def vote(
        self,
        request_id: str,
        voter: dict[str, str],
        vote: str,
        body: Callable[[ApprovalRequest], dict[str, Any]],
        *,
        reason: str | None = None,
        refuse: Callable[[ApprovalRequest], dict[str, Any] | None] | None = None,
    ) -> Decided | AlreadyDecided | Counted | TimedOut | Refused:
        """Count one approver's vote (`approved` | `rejected`), deciding when it settles the request.

        The request row is locked first (`SELECT ... FOR UPDATE` on PostgreSQL; SQLite's
        `BEGIN IMMEDIATE` already serialises writers), so concurrent votes are counted one after the
        other: none is lost and none counted twice. `refuse(request)`, given the locked row, returns
        the audit detail of a refusal (`{"why": code, ...}`) or None: so whether the voter may vote
        is decided on the row as it is when the vote counts, not as it was read before (an
        escalation in between changes the approvers), in the same transaction. A vote after the
        request's `expires_at` (database clock) is refused (`TimedOut`): the timeout decides, even
        before the sweep runs. One rejection rejects; `required_approvals` distinct approvals
        approve (`decided_by` lists them all), with a grant valid for the request's `grant_ttl`
        rule (seconds, default 900). A second vote by the same approver is not counted again
        (`Counted.repeated`). Raises `LookupError` for an unknown request id.
        """
        with self._write() as session:
            found = session.execute(
                select(ApprovalRequest, _not_timed_out().label("on_time"))
                .where(ApprovalRequest.id == request_id)
                .with_for_update()
            ).one_or_none()
            if found is None:
                raise LookupError(f"no approval request {request_id!r}")
            request, on_time = found
            refusal = refuse(request) if refuse is not None else None
            if refusal is not None:
                self._audit(session, request_id, "refused", voter["slack_user_id"], **refusal)
                return Refused(request, refusal["why"])
            if request.status != PENDING:
                return AlreadyDecided(request)
            if not on_time:
                return TimedOut(request)
            values = {
                "request_id": request_id,
                "slack_user_id": voter["slack_user_id"],
                "name": voter["name"],
                "vote": vote,
            }
            if not self._insert(session, Vote, values):
                self._audit(session, request_id, "vote_repeated", voter["slack_user_id"], vote=vote)
                return Counted(request, self._approvals(session, request_id), repeated=True)
            self._audit(session, request_id, "vote", voter["slack_user_id"], vote=vote, reason=reason)
            approvals = self._approvals(session, request_id)
            grant_ttl = request.rules.get("grant_ttl", 900)
            if vote == REJECTED:
                verdict = _verdict(REJECTED, [voter], "slack", reason, grant_ttl)
            elif len(approvals) >= request.required_approvals:
                verdict = _verdict(APPROVED, approvals, "slack", reason, grant_ttl)
            else:
                return Counted(request, approvals)
            decided = self._decide_in(session, request_id, verdict, body)
            assert decided is not None  # the row is locked and was pending
            return decided

    @staticmethod
    def _approvals(session: Session, request_id: str) -> list[dict[str, str]]:
        stmt = select(Vote).where(Vote.request_id == request_id, Vote.vote == APPROVED).order_by(Vote.at)
        return [{"slack_user_id": v.slack_user_id, "name": v.name} for v in session.scalars(stmt)]

    def pending_for(self, user_id: str, limit: int = 50) -> list[ApprovalRequest]:
        """The pending requests `user_id` (a Slack user id) may decide now, newest first (`created_at`,
        then id), at most `limit`: those whose current level's `approvers` include the user. User
        groups were resolved to their members at intake and at each escalation, so a group member is
        listed, and a request that escalated is listed for its new approvers only.

        PostgreSQL answers with a JSONB containment (`approvers @> '["U…"]'`) over the partial GIN
        index `ix_approval_requests_pending_approvers` (migration 0005). SQLite scans the pending rows
        (`json_each`): it is the one-machine option.
        """
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(
                    _is_pending(),
                    _approver_is(session.get_bind().dialect.name, user_id),
                )
                .order_by(ApprovalRequest.created_at.desc(), ApprovalRequest.id.desc())
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def votes(self, request_id: str) -> list[Vote]:
        """The votes cast on a request, oldest first."""
        with self._read() as session:
            return list(session.scalars(select(Vote).where(Vote.request_id == request_id).order_by(Vote.at)))

    def due_for_timeout(self, limit: int = 100) -> list[ApprovalRequest]:
        """Pending requests whose current level has timed out by the database clock, oldest first."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(ApprovalRequest.status == PENDING, ApprovalRequest.expires_at <= utcnow())
                .order_by(ApprovalRequest.expires_at)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def expire(
        self, due: Sequence[tuple[ApprovalRequest, str]], body: Callable[[ApprovalRequest], dict[str, Any]]
    ) -> list[Decided]:
        """End timed-out requests as `expired`, each `(request, result)` with the policy's `result`
        (`deny` | `allow`), all in one transaction (one commit for the batch, not one per request).

        Each is conditional on the request still pending at the same escalation level and past its
        `expires_at` (database clock), so a click racing the sweep, or two sweeps, end in exactly one
        terminal state. `allow` lets the payload run (a grant, flagged `auto_proceeded` in the audit
        trail). Returns the `Decided` of the requests this call expired, in `due` order; those that
        something else got to first are left out. Any error rolls the whole batch back.
        """
        decided = []
        with self._write() as session:
            for request, result in due:
                grant_ttl = request.rules.get("grant_ttl", 900)
                values = _verdict(EXPIRED, [], "timeout", None, grant_ttl, timeout_result=result)
                one = self._decide_in(
                    session,
                    request.id,
                    values,
                    body,
                    *self._timed_out(request),
                    result=result,
                    level=request.level,
                    auto_proceeded=result == "allow",
                )
                if one is not None:
                    decided.append(one)
        return decided

    @staticmethod
    def _timed_out(request: ApprovalRequest) -> tuple[Any, ...]:
        return (ApprovalRequest.level == request.level, ApprovalRequest.expires_at <= utcnow())

    def escalate(
        self, request: ApprovalRequest, channel: str, approvers: list[str], timeout: int | None
    ) -> ApprovalRequest | None:
        """Move a timed-out request to its next escalation level: a new channel and approvers, a
        fresh clock (`timeout` seconds from the database's now) and reminders, no card yet, and no
        votes (the new level's approvers decide afresh); audit `escalated` with the old card.
        Same conditions as `expire`; None if something else won."""
        values = {
            "level": request.level + 1,
            "channel": channel,
            "approvers": approvers,
            "card_ts": None,
            "expires_at": utcnow_plus(timeout) if timeout else None,
            "level_started_at": utcnow(),
            "reminders_sent": 0,
            "next_reminder_at": _first_reminder(request.rules),
            "card_lease_until": None,
            "card_attempts": 0,
        }
        with self._write() as session:
            row = _update_request(
                session,
                (
                    ApprovalRequest.id == request.id,
                    ApprovalRequest.status == PENDING,
                    *self._timed_out(request),
                ),
                **values,
            )
            if row is not None:
                self._audit(
                    session,
                    request.id,
                    "escalated",
                    None,
                    level=row.level,
                    to_channel=channel,
                    from_channel=request.channel,
                    from_ts=request.card_ts,
                )
                session.execute(delete(Vote).where(Vote.request_id == request.id))  # a new level votes afresh
        return row

    def due_for_reminder(self, limit: int = 100) -> list[ApprovalRequest]:
        """Pending requests with a card whose next reminder is due (database clock); found through
        the partial index `ix_approval_requests_reminders_due` (migration 0005)."""
        with self._read() as session:
            stmt = (
                select(ApprovalRequest)
                .where(
                    _is_pending(),
                    ApprovalRequest.card_ts.is_not(None),
                    ApprovalRequest.next_reminder_at <= utcnow(),
                )
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def claim_reminder(self, request: ApprovalRequest) -> bool:
        """Take the request's next reminder (once, even with two sweepers) and schedule the one after."""
        offsets = request.rules.get("reminders", [])
        sent = request.reminders_sent + 1
        later = (
            request.level_started_at + timedelta(seconds=offsets[sent])
            if sent < len(offsets) and request.level_started_at is not None
            else None
        )
        with self._write() as session:
            where = (
                ApprovalRequest.id == request.id,
                ApprovalRequest.status == PENDING,
                ApprovalRequest.level == request.level,
                ApprovalRequest.reminders_sent == request.reminders_sent,
            )
            claimed = _update_request(session, where, reminders_sent=sent, next_reminder_at=later) is not None
            if claimed:
                self._audit(session, request.id, "reminded", None, level=request.level, reminder=sent)
        return claimed

    def claim_execution(self, request_id: str, actor: str) -> ApprovalRequest:
        """Claim the single execution of an approved request whose grant has not expired (database clock).

        One conditional UPDATE (`execution IS NULL AND grant_expires_at > now`), so of two workers
        racing on one decision exactly one gets the request back; audits `execution_started`.
        Raises `ExecutionRefused` (`why`: `unknown_request` | `not_approved` | `already_executed` |
        `grant_expired`), audited as `execution_refused`.
        """
        with self._write() as session:
            row = _update_request(
                session,
                (
                    ApprovalRequest.id == request_id,
                    ApprovalRequest.approved_payload.is_not(None),
                    ApprovalRequest.execution.is_(None),
                    ApprovalRequest.grant_expires_at > utcnow(),
                ),
                execution=STARTED,
                executed_at=utcnow(),
            )
            if row is not None:
                self._audit(session, request_id, "execution_started", actor)
                return row
            current = session.get(ApprovalRequest, request_id)
            why = _why_not_executable(current)
            self._audit(session, request_id, "execution_refused", actor, why=why)
        raise ExecutionRefused(request_id, why)

    def record_outcome(
        self, request_id: str, ok: bool, detail: str | None, actor: str
    ) -> ApprovalRequest | None:
        """Close an approved request's execution as `executed` (ok) or `failed`, once; audit it.

        Accepts a request whose execution was claimed (`started`) or, for agents that execute
        elsewhere, not claimed at all. Returns the updated request, or None if it was already
        closed or is not approved.
        """
        outcome = EXECUTED if ok else FAILED
        with self._write() as session:
            row = _update_request(
                session,
                (
                    ApprovalRequest.id == request_id,
                    ApprovalRequest.approved_payload.is_not(None),
                    or_(ApprovalRequest.execution.is_(None), ApprovalRequest.execution == STARTED),
                ),
                execution=outcome,
                execution_detail=detail,
                executed_at=utcnow(),
            )
            if row is not None:
                self._audit(session, request_id, outcome, actor, detail=detail)
        return row

    def record(self, request_id: str, event: str, actor: str | None, **detail: Any) -> None:
        """Append an audit event that changes nothing else (a refused click, a lost job sent again)."""
        with self._write() as session:
            self._audit(session, request_id, event, actor, **detail)

    def record_duplicate(self, duplicate_id: str, request_id: str) -> None:
        """Note (audit `duplicate_of`) that `duplicate_id` was issued for the same key and payload as
        `request_id`, so that looking up either finds the one request."""
        with self._write() as session:
            self._audit(session, duplicate_id, "duplicate_of", None, original=request_id)

    def dead_letter(self, letter_id: str, reason: str, received: Any) -> bool:
        """Keep an intake message that cannot become a request, with its reason; audit `dead_lettered`.

        Idempotent on `letter_id` (a retried job does not add a second letter). True when new.
        """
        with self._write() as session:
            new = self._insert(session, DeadLetter, {"id": letter_id, "reason": reason, "received": received})
            if new:
                self._audit(session, letter_id, "dead_lettered", None, reason=reason)
        return new

    def get(self, request_id: str) -> ApprovalRequest | None:
        """The request with this id, or None."""
        with self._read() as session:
            return session.get(ApprovalRequest, request_id)

    def get_dead_letter(self, letter_id: str) -> DeadLetter | None:
        """The dead letter with this id, or None."""
        with self._read() as session:
            return session.get(DeadLetter, letter_id)

    def audit_trail(self, request_id: str) -> list[AuditEvent]:
        """The audit events of a request (or dead letter), oldest first."""
        with self._read() as session:
            stmt = select(AuditEvent).where(AuditEvent.request_id == request_id).order_by(AuditEvent.id)
            return list(session.scalars(stmt))

    def outbox_event(self, request_id: str) -> OutboxEvent | None:
        """The resume event of a decided request (its `body` is the decision sent), or None."""
        with self._read() as session:
            return session.scalars(select(OutboxEvent).where(OutboxEvent.request_id == request_id)).first()

    def unpublished(self, limit: int = 100) -> list[OutboxEvent]:
        """Outbox events not yet on their RQ queue, oldest first, at most `limit`."""
        with self._read() as session:
            stmt = (
                select(OutboxEvent)
                .where(OutboxEvent.published_at.is_(None))
                .order_by(OutboxEvent.id)
                .limit(limit)
            )
            return list(session.scalars(stmt))

    def recently_published(self, window_seconds: int, limit: int = 1000) -> list[OutboxEvent]:
        """Outbox events published in the last `window_seconds` (database clock), newest first."""
        with self._read() as session:
            stmt = (
                select(OutboxEvent)
                .where(OutboxEvent.published_at > utcnow_plus(-window_seconds))
                .order_by(OutboxEvent.published_at.desc())
                .limit(limit)
            )
            return list(session.scalars(stmt))

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

    @staticmethod
    def _one(session: Session, request_id: str) -> ApprovalRequest:
        row = session.get(ApprovalRequest, request_id)
        if row is None:
            raise LookupError(f"no approval request {request_id!r}")
        return row


def _verdict(
    outcome: str,
    decided_by: list[dict[str, str]],
    via: str,
    reason: str | None,
    grant_ttl: int,
    approved_payload: dict[str, Any] | None = None,
    edits: list[dict[str, Any]] | None = None,
    timeout_result: str | None = None,
) -> dict[str, Any]:
    """The column values of a decision. What may run (`approved_payload`, and a grant expiring
    `grant_ttl` seconds after the database's now) is set for approvals and for timeouts that
    `allow`."""
    values: dict[str, Any] = {
        "status": outcome,
        "decided_by": decided_by,
        "decided_via": via,
        "decision_reason": reason,
        "decided_at": utcnow(),
        "edits": edits or [],
        "timeout_result": timeout_result,
    }
    if outcome == APPROVED or timeout_result == "allow":
        values["approved_payload"] = (
            approved_payload if approved_payload is not None else ApprovalRequest.payload
        )
        values["grant_expires_at"] = utcnow_plus(grant_ttl)
    return values


def _update_request(session: Session, where: tuple[Any, ...], **values: Any) -> ApprovalRequest | None:
    """One conditional UPDATE of a request: the updated row, or None when `where` did not hold
    (someone else got there first)."""
    stmt = update(ApprovalRequest).where(*where).values(**values).returning(ApprovalRequest)
    return session.scalars(stmt).one_or_none()


def _is_pending() -> Any:
    """`status = 'pending'` with the literal in the SQL text, not a bound parameter, so that the
    partial indexes `WHERE status = 'pending'` (migration 0005) match it on both backends, also in
    a prepared statement's generic plan."""
    return ApprovalRequest.status == literal(PENDING, literal_execute=True)


def _approver_is(dialect: str, user_id: str) -> Any:
    """The request's current `approvers` (a JSON array of Slack user ids) include `user_id`."""
    if dialect == "postgresql":
        return type_coerce(ApprovalRequest.approvers, JSONB).contains([user_id])
    each = func.json_each(ApprovalRequest.approvers).table_valued("value")
    return select(each.c.value).where(each.c.value == user_id).exists()


def _not_timed_out() -> Any:
    """The request has no deadline, or it has not passed (database clock)."""
    return or_(ApprovalRequest.expires_at.is_(None), ApprovalRequest.expires_at > utcnow())


def _no_live_card_lease() -> Any:
    """Nobody holds an unexpired lease on posting the request's card (database clock)."""
    return or_(ApprovalRequest.card_lease_until.is_(None), ApprovalRequest.card_lease_until <= utcnow())


def _first_reminder(rules: dict[str, Any]) -> Any:
    offsets = rules.get("reminders") or []
    return utcnow_plus(offsets[0]) if offsets else None


def resume_job_id(request_id: str) -> str:
    """The RQ job id of a request's resume job; RQ allows `[A-Za-z0-9_-]` in custom ids."""
    return f"resume-{request_id}"


def _why_not_executable(request: ApprovalRequest | None) -> str:
    if request is None:
        return "unknown_request"
    if request.approved_payload is None:
        return "not_approved"
    return "already_executed" if request.execution is not None else "grant_expired"
