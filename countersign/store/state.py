"""The approval request state machine, the audit log, the outbox and dead letters.

This is the only module that changes a request's state. Every transition is one conditional UPDATE
(`... WHERE status = 'pending'`), so when two reviewers click at once the first writer wins and the
other sees zero rows updated; the decision, its audit event and its outbox row commit together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from sqlalchemy import Connection, delete, select
from sqlalchemy.orm import Session

from ..defaults import GRANT_TTL_SECONDS
from ..exceptions import UnknownRequest
from .deliveries import CARD_LEASE_SECONDS, Deliveries
from .expiries import allowed_rows, expire_all_due_pg
from .models import (
    ApprovalRequest,
    Decider,
    Edit,
    Execution,
    Outcome,
    Status,
    TimeoutResult,
    Via,
    Vote,
)
from .records import intake_taken, outcome_unknown
from .results import AlreadyDecided, Counted, Decided, NotExecutable, Refused, ResumeEvent, TimedOut
from .rows import COLUMNS, Request, RequestRow, request_row
from .rules import Rules
from .sql import (
    audit_row,
    changed_request,
    execution_update,
    expire_all_due,
    expire_due,
    level_clock,
    on_postgresql,
    resume_taken,
    timeout_due,
    update_request,
    why_not_executable,
)
from .statements import CLAIM, LOCKED, OUTCOME, SAME_KEY, Decision, changed, created
from .transaction import Transaction, Writer
from .webhooks import WebhookDeliveries, due_now
from .writes import insert_outbox

Resume = Callable[[Request], ResumeEvent]
POLICY = "policy"
"""The audit actor of a decision no reviewer made: a policy rule's, or the policy's timeout."""
Refuse = Callable[[Request], dict[str, Any] | None]
"""Given the locked request row, the audit detail of refusing the reviewer (`{"why": code, ...}`), or None."""


class Store(Deliveries, WebhookDeliveries):
    """Transactions over the countersign database: every change of a request's state. Safe to share
    between threads."""

    def create(self, values: dict[str, Any], card_lease: bool = False) -> tuple[Request, bool]:
        """Insert a pending request unless its id or (requester, idempotency key) exists; audit `requested`.

        `values` holds the `ApprovalRequest` columns except status, card and decision; the audit
        event carries the action class and `rules.review_rule` (the policy rule that decided). The
        clock (`expires_at`, first reminder) starts now by the database, from `rules` (and again at
        `attach_card`). Returns `(request, created)`: the stored row, which for `created=False` is
        the earlier request with the same requester and key (compare `payload_sha256`: repeat or conflict).
        The row, its audit event and the removal of its intake message are one statement on
        PostgreSQL (`sql.changed_request`). With `card_lease`, a created request comes with its
        card's posting lease taken, as `claim_card` takes it (`CARD_LEASE_SECONDS`, `card_attempts`
        1), in the same INSERT: its creator posts the card without claiming it; everyone else
        (a second run of the intake, the card sweep) waits for the lease as for a claim.
        """
        with self._connection(write=True) as connection:
            found = _insert_pending(connection, values, card_lease)
        if found is not None:
            return found[0], True
        with self._transaction() as session:
            return _earlier(session, values), False

    def create_approved(
        self, values: dict[str, Any], resume: Resume, grant_ttl: int = GRANT_TTL_SECONDS
    ) -> tuple[Decided | Request, bool]:
        """Store a request the policy's gate lets through, approved by `POLICY` (`via` `policy`,
        reason `rules.review_rule`), in ONE transaction: the row, its `requested`, `approved` and
        `resume_published` audit events, its resume event and its grant (`grant_ttl` seconds), as
        `create` then `decide` write them. No crash leaves it pending without a card lease, a row
        the card sweep would take for a card whose posting died (DESIGN.md, invariant 12).

        `values` as for `create`. Returns `(Decided, True)` when created, else `(row, False)` as
        `create` does, left as it is: the request of the same id (an earlier run of its intake
        stored it) or the earlier request with the same requester and key (compare
        `payload_sha256`); its own gate's answer (`rules.review_rule`) says what is due to it."""
        rules: Rules = values["rules"]
        decision = Decision(Outcome.APPROVED, [], Via.POLICY, rules.review_rule, grant_ttl)
        with self._transaction() as session:
            found = _insert_pending(session, values, card_lease=False)
            if found is not None:
                decided = self._decide_in(session, found[0], decision, resume, POLICY)
                assert decided is not None  # inserted pending in this transaction
                return decided, True
            return _earlier(session, values), False

    def decide(
        self,
        request_id: str,
        outcome: Literal[Outcome.APPROVED, Outcome.REJECTED],
        decided_by: list[Decider],
        via: Via,
        resume: Resume,
        *,
        reason: str | None = None,
        approved_payload: dict[str, Any] | None = None,
        edits: list[Edit] | None = None,
        grant_ttl: int = GRANT_TTL_SECONDS,
        refuse: Refuse | None = None,
        where: str | None = None,
        shown: dict[str, Any] | None = None,
    ) -> Decided | AlreadyDecided | TimedOut | Refused:
        """Move a pending request to `outcome` (`approved` | `rejected`), first writer wins.

        In one transaction: the request row locked (`_locked`), the conditional UPDATE, the audit
        event named after the outcome, and the outbox row `resume(decided request)` (the resume job's
        id and decision). `via` is `slack` (a reviewer, `decided_by[0]`) or `policy` (the timeout
        decides through `expire`). A reviewer's decision is authorised on the locked row by
        `refuse(request)`, as in `vote` (a refusal is audited and returned as `Refused`), and one after
        the request's `expires_at` (database clock) is `TimedOut`. An approval may carry
        `approved_payload` (the reviewer's edit; default: the frozen payload) with its `edits` diff,
        and its grant expires `grant_ttl` seconds after the database's now. Raises `UnknownRequest`
        for an unknown request id, and `ValueError` for a decision via `slack` without `refuse`.
        `where` (a reviewer's: `card` or `home`, the surface clicked) and `shown` (what Slack says
        the reviewer was shown: `{"text", "blocks_sha256"[, "view"]}`) go into the audit event.
        """
        if via == Via.SLACK and refuse is None:
            raise ValueError("a reviewer's decision is authorised on the row it locks: pass refuse")
        decision = Decision(outcome, decided_by, via, reason, grant_ttl, approved_payload, edits)
        with self._transaction() as session:
            request, on_time = self._locked(session, request_id)
            actor = decided_by[0]["slack_user_id"] if decided_by else POLICY
            if via == Via.SLACK:
                stopped = self._cannot_decide(session, request, on_time, actor, refuse)
            else:
                stopped = None if request.status == Status.PENDING else AlreadyDecided(request)
            if stopped is not None:
                return stopped
            decided = self._decide_in(session, request, decision, resume, actor, where, shown)
            assert decided is not None  # the row is locked and was pending
            return decided

    def _locked(self, session: Transaction, request_id: str) -> tuple[RequestRow, bool]:
        """The request row, locked until the transaction ends (`SELECT ... FOR UPDATE` on
        PostgreSQL; SQLite's `BEGIN IMMEDIATE` already serialises writers), and whether it is before
        its `expires_at` (database clock). Raises `UnknownRequest` for an unknown request id."""
        found = session.execute(LOCKED, {"for_request": request_id}).one_or_none()
        if found is None:
            raise UnknownRequest(request_id)
        return request_row(found), bool(found[COLUMNS])

    def _cannot_decide(
        self, session: Transaction, request: Request, on_time: bool, actor: str, refuse: Refuse | None
    ) -> Refused | AlreadyDecided | TimedOut | None:
        """Why reviewer `actor` may not decide the locked `request` now: `refuse(request)` says so
        (audited `refused` with its detail), it is decided already, or past its deadline; None when
        they may."""
        refusal = refuse(request) if refuse is not None else None
        if refusal is not None:
            self._audit(session, request.id, "refused", actor, **refusal)
            return Refused(request, refusal["why"])
        if request.status != Status.PENDING:
            return AlreadyDecided(request)
        return None if on_time else TimedOut(request)

    def _decide_in(
        self,
        session: Transaction,
        locked: RequestRow,
        decision: Decision,
        resume: Resume,
        actor: str,
        surface: str | None = None,
        shown: dict[str, Any] | None = None,
    ) -> Decided | None:
        """The conditional UPDATE out of `pending` of the `locked` row (`_locked`, in this
        transaction), its audit event by `actor` (the Slack user whose click decided, or `POLICY`;
        with the `surface` and what they were `shown`, when given), and its resume event
        (`_resume_events`)."""
        stmt, params = decision.update(locked.id)
        found = session.execute(stmt, params).one_or_none()
        if found is None:
            return None
        detail = {"via": decision.via, "reason": decision.reason, "edits": decision.edits or []}
        detail |= _seen(surface, shown)
        self._audit(session, locked.id, Status(decision.outcome), actor, **detail)
        return self._resume_events(session, [changed(locked, found)], resume, actor)[0]

    def _resume_events(
        self, session: Writer, rows: Sequence[Request], resume: Resume, actor: str
    ) -> list[Decided]:
        """The outbox rows `resume(row)` of just-decided `rows` (one INSERT for all, which on PostgreSQL
        also inserts the transaction's audit events), each with its `resume_published` audit event by
        `actor` when the request names a resume target (a queue or a webhook; a request without one
        is taken by long poll or in process, and its row only rings its bell): written in the
        decision's transaction, so it precedes whatever the agent's worker records (the relay then
        delivers the row to its queue at least once)."""
        if not rows:
            return []
        values = []
        for row in rows:
            job_id, body = resume(row)
            target = {"webhook": row.resume_webhook} if row.resume_webhook else {"queue": row.resume_queue}
            if row.resume_webhook or row.resume_queue:
                self._audit(session, row.id, "resume_published", actor, job_id=job_id, **target)
            values.append(
                {
                    "request_id": row.id,
                    "queue": row.resume_queue,
                    "func": row.resume_func,
                    "webhook": row.resume_webhook,
                    "job_id": job_id,
                    "body": body,
                }
            )
        events = {event.request_id: event for event in insert_outbox(session, values)}
        due_now(session, events.values())  # the webhooks among them: the sweep POSTs those
        return [Decided(row, events[row.id]) for row in rows]

    def vote(
        self,
        request_id: str,
        voter: Decider,
        vote: Literal[Outcome.APPROVED, Outcome.REJECTED],
        resume: Resume,
        *,
        reason: str | None = None,
        refuse: Refuse | None = None,
        where: str | None = None,
        shown: dict[str, Any] | None = None,
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
        approve (`decided_by` lists them all), with a grant valid for the request's
        `rules.grant_ttl_seconds`. A second vote by the same approver is not counted again
        (`Counted.repeated`). Only a request that needs more than one approval keeps its votes
        (`votes`); the one vote that settles any other is its decision (`decided_by`). `where` (the
        surface clicked: `card` or `home`) and `shown` (what Slack says the voter was shown: `{"text",
        "blocks_sha256"[, "view"]}`) go into the `vote` and decision audit events. Raises
        `UnknownRequest` for an unknown request id. One Core transaction (`Queries._transaction`):
        no ORM object is loaded or kept.
        """
        with self._transaction() as session:
            request, on_time = self._locked(session, request_id)
            stopped = self._cannot_decide(session, request, on_time, voter["slack_user_id"], refuse)
            if stopped is not None:
                return stopped
            counted = (
                self._count(session, request, voter, vote) if request.required_approvals > 1 else [voter]
            )
            if isinstance(counted, Counted):
                return counted
            seen = _seen(where, shown)
            self._audit(session, request_id, "vote", voter["slack_user_id"], vote=vote, reason=reason, **seen)
            approvals = counted
            grant_ttl = request.rules.grant_ttl_seconds
            if vote == Outcome.REJECTED:
                decision = Decision(Outcome.REJECTED, [voter], Via.SLACK, reason, grant_ttl)
            elif len(approvals) >= request.required_approvals:
                decision = Decision(Outcome.APPROVED, approvals, Via.SLACK, reason, grant_ttl)
            else:
                return Counted(request, approvals)
            decided = self._decide_in(
                session, request, decision, resume, voter["slack_user_id"], where, shown
            )
            assert decided is not None  # the row is locked and was pending
            return decided

    def _count(
        self, session: Transaction, request: Request, voter: Decider, vote: Outcome
    ) -> list[Decider] | Counted:
        """Store the vote of a request that needs a quorum (a `votes` row; a request one approval
        settles needs none): the approvals counted so far, this one included, or `Counted.repeated`
        (audited `vote_repeated`) when the voter had voted already."""
        values = {"request_id": request.id, "slack_user_id": voter["slack_user_id"], "name": voter["name"]}
        if not self._insert(session, Vote, {**values, "vote": vote}):
            self._audit(session, request.id, "vote_repeated", voter["slack_user_id"], vote=vote)
            return Counted(request, self._approvals(session, request.id), repeated=True)
        return self._approvals(session, request.id)

    @staticmethod
    def _approvals(session: Transaction, request_id: str) -> list[Decider]:
        """The approvals counted on a quorum request so far, oldest first."""
        stmt = (
            select(Vote.slack_user_id, Vote.name)
            .where(Vote.request_id == request_id, Vote.vote == Outcome.APPROVED)
            .order_by(Vote.at)
        )
        return [{"slack_user_id": user, "name": name} for user, name in session.execute(stmt)]

    def expire(self, due: Sequence[tuple[Request, TimeoutResult]], resume: Resume) -> list[Decided]:
        """End timed-out requests as `expired`, each `(request, result)` with the policy's `result`
        (`deny` | `allow`), all in one transaction: one conditional UPDATE ... RETURNING per result
        and grant lifetime (usually one for the batch), one INSERT of their resume events and one
        of their audit events.

        Each is conditional on the request still pending at the same escalation level and past its
        `expires_at` (database clock), so a click racing the sweep, or two sweeps, end in exactly one
        terminal state. `allow` lets the payload run (a grant, flagged `auto_proceeded` in the audit
        trail), but only for a request whose card is posted, as the UPDATE finds the row: one no
        reviewer was shown is denied (fails closed; audited `card_shown: false`). A request with a
        card gets `card_refresh_due_at` (now), so the card sweep rewrites it at Slack's pace. Returns
        the `Decided` of the requests this call expired, in `due` order (not those something else
        got to first). Any error rolls the whole batch back.
        """
        groups: dict[tuple[TimeoutResult, int], list[Request]] = {}
        for request, asked in due:
            groups.setdefault((asked, request.rules.grant_ttl_seconds), []).append(request)
        with self._write() as session:
            rows = [
                row for (asked, ttl), some in groups.items() for row in expire_due(session, some, asked, ttl)
            ]
            decided = {one.request.id: one for one in self._expired(session, rows, resume)}
        return [decided[request.id] for request, _ in due if request.id in decided]

    def expire_due(self, limit: int, resume: Resume) -> list[Decided]:
        """Expire up to `limit` requests that are due (past `expires_at`, database clock, oldest first)
        and whose policy does not escalate them (their level's `on_timeout` is `deny` or `allow`, or
        it is the last level), as `expire` would with that `on_timeout`, reading nothing first: one
        UPDATE ... RETURNING (`sql.expire_all_due`, the policy read from the stored rules in SQL) and
        one INSERT of the resume and audit events. Rows another transaction holds (a click deciding
        it) are left to it or to the next call. Returns the `Decided` of those expired, in any order
        (their rows hold only the decision's columns, `sql.EXPIRED_COLUMNS`);
        fewer than `limit` when no more were due. Requests that escalate are left to
        `due_for_timeout` and `escalate`. Any error rolls the whole batch back.

        On PostgreSQL the expiries that deny get their resume and audit events in the UPDATE's own
        statement, built in SQL (`expiries.expire_all_due_pg`; `resume` is not called for them, and
        their rows hold only `expiries.RETURNED`); those that `allow` are read again and signed by
        `resume` in the same transaction."""
        with self._write() as session:
            if not on_postgresql(session):
                return self._expired(session, expire_all_due(session, limit), resume)
            denied, allowed = expire_all_due_pg(session, limit)
            return denied + self._expired(session, allowed_rows(session, allowed), resume)

    def _expired(self, session: Session, rows: Sequence[ApprovalRequest], resume: Resume) -> list[Decided]:
        """The audit events (`expired` by `POLICY`) and resume events (`_resume_events`) of `rows`,
        just expired in the transaction `session`."""
        for row in rows:
            result = row.timeout_result
            detail: dict[str, Any] = {
                "via": Via.TIMEOUT,
                "reason": None,
                "edits": [],
                "result": result,
                "level": row.level,
            }
            shown = {"auto_proceeded": result == TimeoutResult.ALLOW, "card_shown": row.card_ts is not None}
            self._audit(session, row.id, Outcome.EXPIRED, POLICY, **detail, **shown)
        return self._resume_events(session, rows, resume, POLICY)

    def escalate(self, request: Request, channel: str, approvers: list[str]) -> RequestRow | None:
        """Move a timed-out request to its next escalation level: a new channel and approvers, a
        fresh clock (the level's timeout from the database's now, started again when its card is
        posted: `attach_card`) and reminders, no card yet, and no votes (the new level's approvers
        decide afresh); the level left behind's approvers join `earlier_approvers`; audit
        `escalated` with the old card. Same conditions as `expire`; None if something else won."""
        values = {
            "level": request.level + 1,
            "channel": channel,
            "approvers": approvers,
            "earlier_approvers": list(dict.fromkeys([*request.earlier_approvers, *request.approvers])),
            "card_ts": None,
            **level_clock(request.rules, request.level + 1),
            "card_lease_until": None,
            "card_attempts": 0,
        }
        with self._write() as session:
            row = update_request(
                session,
                (
                    ApprovalRequest.id == request.id,
                    ApprovalRequest.status == Status.PENDING,
                    ApprovalRequest.level == request.level,
                    timeout_due(),
                ),
                audit_row(
                    request.id,
                    "escalated",
                    None,
                    level=request.level + 1,
                    to_channel=channel,
                    from_channel=request.channel,
                    from_ts=request.card_ts,
                ),
                **values,
            )
            if row is not None:
                session.execute(delete(Vote).where(Vote.request_id == request.id))  # a new level votes afresh
        return row

    def claim_execution(self, request_id: str, actor: str) -> NotExecutable | None:
        """Claim the single execution of an approved request whose grant has not expired (database clock).

        One conditional UPDATE (`execution IS NULL AND grant_expires_at > now`), so of two workers
        racing on one decision exactly one gets None back (claimed: it runs the action); audits
        `execution_started`. Otherwise returns `NotExecutable` (`why`: `unknown_request` |
        `not_approved` | `already_executed` | `already_failed` | `outcome_unknown` | `grant_expired`),
        audited as `execution_refused`. Either way the agent has its decision: a problem noted on the resume
        event (`OutboxEvent.problem`) is cleared; but `outcome_unknown` (a run claimed before has
        reported no outcome: its worker died or was stopped in it, or it still runs) notes that
        problem instead (`OutcomeUnknown`, with the run's `started_at`, also in the audit detail),
        which only the outcome clears (`record_outcome`). On PostgreSQL a claim is one statement in
        autocommit that returns the request's id alone (`sql.execution_update`).
        """
        with self._connection(write=True) as connection:
            audit = audit_row(request_id, "execution_started", actor)
            claimed = execution_update(connection, CLAIM, request_id, audit)
        if claimed:
            return None
        with self._write() as session:
            current = session.get(ApprovalRequest, request_id)
            why = why_not_executable(current)
            detail = {}
            if why == "outcome_unknown" and current is not None:
                detail = outcome_unknown(session, current)
            else:
                resume_taken(session, request_id)
            self._audit(session, request_id, "execution_refused", actor, why=why, **detail)
        return NotExecutable(why)

    def record_outcome(self, request_id: str, ok: bool, detail: str | None, actor: str) -> bool:
        """Close an approved request's execution as `executed` (ok) or `failed`, once; audit it.

        Accepts a request whose execution was claimed (`started`) or, for agents that execute
        elsewhere, not claimed at all (then a problem noted on its resume event is cleared).
        True when recorded now; False if it was already closed or is not approved (or unknown).
        One statement in autocommit on PostgreSQL (`sql.execution_update`).
        """
        outcome = Execution.EXECUTED if ok else Execution.FAILED
        with self._connection(write=True) as connection:
            audit = audit_row(request_id, outcome, actor, detail=detail)
            return execution_update(
                connection, OUTCOME, request_id, audit, new_execution=outcome, new_detail=detail
            )


def _insert_pending(
    writer: Connection | Transaction, values: dict[str, Any], card_lease: bool
) -> Sequence[Any] | None:
    """`create`'s INSERT ... ON CONFLICT DO NOTHING of a pending request (`values`), with its
    `requested` audit event and the removal of its intake message (`sql.changed_request`), in
    `writer`: `(request,)` as inserted, or None when its id or (requester, key) exists."""
    rules: Rules = values["rules"]
    timeout, offsets = rules.level(0).timeout_seconds, rules.reminders_seconds
    why = {"rule": rules.review_rule} if rules.review_rule else {}
    requested = audit_row(values["id"], "requested", values["requester"], action=values["action"], **why)
    params = {f"new_{column}": value for column, value in values.items()}
    params |= {"timeout_seconds": timeout or 0, "reminder_seconds": offsets[0] if offsets else 0}
    params |= {"lease_seconds": CARD_LEASE_SECONDS}
    dialect = "postgresql" if on_postgresql(writer) else "sqlite"
    new = created(dialect, tuple(values), bool(timeout), bool(offsets), card_lease)
    return changed_request(writer, new, [requested], also=intake_taken, params=params)


def _earlier(session: Transaction, values: dict[str, Any]) -> RequestRow:
    """The stored request with the requester and idempotency key of `values` (whose INSERT found
    it); if it has their id (an earlier intake of the same message stored it), its intake message
    is dropped, as its INSERT would have."""
    same_key = {"of_requester": values["requester"], "of_key": values["idempotency_key"]}
    earlier = request_row(session.execute(SAME_KEY, same_key).one())
    if earlier.id == values["id"]:
        session.execute(intake_taken([earlier.id]))
    return earlier


def _seen(where: str | None, shown: dict[str, Any] | None) -> dict[str, Any]:
    """A reviewer's audit detail of where they acted (`where`) and what they were `shown`, each
    when given."""
    return ({"where": where} if where is not None else {}) | ({"shown": shown} if shown is not None else {})
