"""The numbers that tell operators which gates to keep (`countersign stats`): per action class and
per reviewer, how requests ended, how long humans took, and how often an approval looks like a
rubber stamp. Read in one pass over the requests created since a time (UTC); nothing is written.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from .models import ApprovalRequest, AuditEvent, DeadLetter, Status, Via

DETAILS_OPENED = "details_opened"
"""The audit event of a reviewer opening a pending request's Details (router/review.py)."""
QUICK_SECONDS = 10
"""An approval given faster than this, with no edit and no Details opened, counts as a rubber stamp."""
OUTCOMES = ("auto_approved", "approved", "edited", "rejected", "expired", "pending", "dead_lettered")
"""Where an action class's requests are (`outcome_of`; `dead_lettered`: refused at intake, kept in
`dead_letters`, never an approval request): each in exactly one, so they add up to `requests`. A
reviewer's decisions are only ever `approved`, `edited` or `rejected`."""
REVIEWER_OUTCOMES = ("approved", "edited", "rejected")


@dataclass
class Tally:
    """One action class's or reviewer's counts: `requests` (for a reviewer: decisions taken part
    in), where they are (`OUTCOMES`, which add up to `requests`), `escalated` (of those, how many
    reached a later level), the human decisions' `seconds` from request to decision, `quick`
    approvals (rubber stamps) among `human_approvals`, and the rejection `reasons`."""

    requests: int = 0
    auto_approved: int = 0
    approved: int = 0
    edited: int = 0
    rejected: int = 0
    expired: int = 0
    pending: int = 0
    dead_lettered: int = 0
    escalated: int = 0
    human_approvals: int = 0
    quick: int = 0
    seconds: list[float] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """An action class's JSON shape: `requests`, the `OUTCOMES` (they add up to `requests`),
        `escalated`, then `_times`."""
        counts = {"requests": self.requests, **{name: getattr(self, name) for name in OUTCOMES}}
        return {**counts, "escalated": self.escalated, **self._times()}

    def as_reviewer_dict(self) -> dict[str, Any]:
        """A reviewer's JSON shape: `decisions` taken part in, the `REVIEWER_OUTCOMES` (they add up
        to `decisions`), `escalated` (of those, at a later level), then `_times`."""
        counts = {"decisions": self.requests, **{name: getattr(self, name) for name in REVIEWER_OUTCOMES}}
        return {**counts, "escalated": self.escalated, **self._times()}

    def _times(self) -> dict[str, Any]:
        """`median_seconds` and `p95_seconds` (null without human decisions), `rubber_stamp_share`
        (0..1, null without human approvals) and `rejection_reasons` (`{reason: count}`, most
        frequent first)."""
        ordered = sorted(self.seconds)
        p95 = ordered[math.ceil(0.95 * len(ordered)) - 1] if ordered else None
        share = self.quick / self.human_approvals if self.human_approvals else None
        return {
            "median_seconds": round(statistics.median(ordered), 1) if ordered else None,
            "p95_seconds": round(p95, 1) if p95 is not None else None,
            "rubber_stamp_share": round(share, 3) if share is not None else None,
            "rejection_reasons": dict(self.reasons.most_common()),
        }


@dataclass
class Stats:
    """`actions` and `reviewers` (Slack user ids), each name to its `Tally`."""

    actions: dict[str, Tally] = field(default_factory=dict)
    reviewers: dict[str, Tally] = field(default_factory=dict)


def stats(engine: Engine, since: datetime, action: str | None = None, quick: float = QUICK_SECONDS) -> Stats:
    """The `Stats` of the requests created at or after `since` (UTC), of action class `action` or
    all. A request counts once for its class as `auto_approved` (a policy rule approved it),
    `approved`, `edited` (approved with the reviewer's edit), `rejected`, `expired` or `pending`
    (`outcome_of`), or `dead_lettered` (an intake message refused since `since`), plus `escalated`
    when it reached a later level; for each reviewer in its `decided_by` the same (a quorum's
    approvers all take part). An approval faster than `quick` seconds with no edit and no Details
    opened by that reviewer is a rubber stamp."""
    columns = (
        ApprovalRequest.id,
        ApprovalRequest.action,
        ApprovalRequest.status,
        ApprovalRequest.decided_via,
        ApprovalRequest.decided_by,
        ApprovalRequest.edits,
        ApprovalRequest.level,
        ApprovalRequest.created_at,
        ApprovalRequest.decided_at,
        ApprovalRequest.decision_reason,
    )
    stmt = select(*columns).where(ApprovalRequest.created_at >= since).execution_options(yield_per=2000)
    if action is not None:
        stmt = stmt.where(ApprovalRequest.action == action)
    result = Stats()
    with Session(engine) as session, session.begin():
        opened = _details_opened(session, since)
        for row in session.execute(stmt):
            _count(result.actions.setdefault(row.action, Tally()), row, quick, opened, None)
            if row.decided_via == Via.SLACK:
                for decider in row.decided_by or []:
                    user = decider["slack_user_id"]
                    _count(result.reviewers.setdefault(user, Tally()), row, quick, opened, user)
        for name in _dead_lettered(session, since):
            if action is None or name == action:
                tally = result.actions.setdefault(name, Tally())
                tally.requests += 1
                tally.dead_lettered += 1
    return result


def dead_lettered(engine: Engine, since: datetime, action: str | None = None) -> int:
    """How many intake messages dead-lettered since `since` (UTC) named action class `action` (or
    any): the requests of a class `stats` counts as `dead_lettered`, never approval requests."""
    with Session(engine) as session, session.begin():
        return sum(action is None or name == action for name in _dead_lettered(session, since))


def _dead_lettered(session: Session, since: datetime) -> list[str]:
    """The action class of each intake message dead-lettered since `since` (its `request.action`,
    schema.IntakeMessage; `(unreadable)` when it has none)."""
    names = []
    for received in session.scalars(select(DeadLetter.received).where(DeadLetter.at >= since)):
        request = received.get("request") if isinstance(received, dict) else None
        name = request.get("action") if isinstance(request, dict) else None
        names.append(name if isinstance(name, str) and name else "(unreadable)")
    return names


def _details_opened(session: Session, since: datetime) -> set[tuple[str, str | None]]:
    """`(request id, reviewer)` of every Details opened since `since`."""
    stmt = select(AuditEvent.request_id, AuditEvent.actor).where(
        AuditEvent.event == DETAILS_OPENED, AuditEvent.at >= since
    )
    return {(request_id, actor) for request_id, actor in session.execute(stmt)}


def _count(
    tally: Tally, row: Any, quick: float, opened: set[tuple[str, str | None]], user: str | None
) -> None:
    """Add request `row` to `tally` (of its class when `user` is None, else of that reviewer)."""
    tally.requests += 1
    tally.escalated += row.level > 0
    outcome = outcome_of(row)
    setattr(tally, outcome, getattr(tally, outcome) + 1)
    if row.decided_via != Via.SLACK:
        return
    seconds = (row.decided_at - row.created_at).total_seconds()
    tally.seconds.append(seconds)
    if row.status == Status.REJECTED:
        tally.reasons[row.decision_reason or "(no reason given)"] += 1
        return
    tally.human_approvals += 1
    if row.edits:
        return
    deciders = [user] if user is not None else [d["slack_user_id"] for d in row.decided_by or []]
    looked = any((row.id, decider) in opened for decider in deciders)
    tally.quick += seconds < quick and not looked


def outcome_of(row: Any) -> str:
    """Where request `row` is, one of `OUTCOMES`: `auto_approved`, `approved`, `edited`,
    `rejected`, `expired`, or `pending`."""
    if row.status == Status.APPROVED:
        return "auto_approved" if row.decided_via == Via.POLICY else "edited" if row.edits else "approved"
    return str(row.status.value if isinstance(row.status, Status) else row.status)
