"""Requests as plain records: what the store's hot paths (an approval's cycle: create, attach the
card, lock and decide, read, the card's facts) return instead of an ORM `ApprovalRequest`.

Loading a 45-column row into the ORM's identity map (instance state, attribute instrumentation,
the Session's bookkeeping) was most of the store's CPU left in a cycle (BENCHMARKS.md "Issue 14,
eighth pass: plain rows on the hot paths"). A `RequestRow` has the same attribute names and types
as `ApprovalRequest` and the same derived properties (`models.RequestFacts`), so a reader takes
either (`Request`); it is frozen: nothing writes a request but the store's statements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from .facts import RequestFacts
from .models import (
    ApprovalRequest,
    Decider,
    Edit,
    Execution,
    OutboxEvent,
    ResumeProblem,
    Status,
    TimeoutResult,
    Via,
)
from .rules import Rules


@dataclass(frozen=True, slots=True)
class RequestRow(RequestFacts):
    """One approval request as read from its row (the columns of `ApprovalRequest`, which says what
    each means, in the table's order: `tests/store/test_rows.py` checks it). Equal when every
    column is."""

    id: str
    idempotency_key: str
    action: str
    payload: dict[str, Any]
    payload_sha256: str
    summary: str
    reason: str | None
    context: dict[str, Any] | None
    requester: str
    on_behalf_of: str | None
    run_id: str | None
    step: str | None
    confidence: float | None
    resume_queue: str | None
    resume_func: str | None
    resume_webhook: str | None
    status: Status
    channel: str
    approvers: list[Any]
    policy_version: int
    policy_sha256: str
    card_ts: str | None
    created_at: datetime
    decided_at: datetime | None
    decided_by: list[Decider] | None
    decided_via: Via | None
    decision_reason: str | None
    rules: Rules
    approved_payload: dict[str, Any] | None
    edits: list[Edit] | None
    grant_expires_at: datetime | None
    execution: Execution | None
    execution_detail: str | None
    executed_at: datetime | None
    review_reason: str | None
    required_approvals: int
    expires_at: datetime | None
    level: int
    level_started_at: datetime | None
    reminders_sent: int
    timeout_result: TimeoutResult | None
    next_reminder_at: datetime | None
    card_lease_until: datetime | None
    card_attempts: int
    card_refresh_due_at: datetime | None
    earlier_approvers: list[Any]


Request = ApprovalRequest | RequestRow
"""A request as the store returns it: an ORM object (the sweeps' and lists' reads) or a plain row
(the cycle's hot paths); the same attributes either way. Read it, never write it back."""
COLUMNS = len(fields(RequestRow))
"""How many columns a request's row has: a statement returning the row and more (`card_facts`, the
row lock's `on_time`) has its other values after these."""


def request_row(row: Sequence[Any]) -> RequestRow:
    """The request in the first `COLUMNS` values of a result row selecting or returning the whole
    `approval_requests` row first (`sql.REQUESTS`, in the table's column order)."""
    return RequestRow(*row[:COLUMNS])


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One resume event as read from its row (the columns of `models.OutboxEvent`, which says what
    each means, in the table's order): what a decision's transaction returns (`writes.insert_outbox`)
    instead of an ORM object."""

    id: int
    request_id: str
    queue: str | None
    func: str | None
    webhook: str | None
    attempts: int
    next_attempt_at: datetime | None
    job_id: str
    body: dict[str, Any]
    created_at: datetime
    published_at: datetime | None
    problem: ResumeProblem | None


Event = OutboxEvent | OutboxRow
"""A resume event as the store returns it: an ORM object (the sweeps' reads) or a plain row (a
decision's); the same attributes either way. Read it, never write it back."""
