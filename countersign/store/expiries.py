"""PostgreSQL: a batch of expiries that deny, with their resume events and audit events, written by
one statement that builds them from the expired rows, nothing in Python (the resume events are then
read back for the relay).

A `deny` decision has no grant, so its resume event's body (the `Decision` JSON, `decision_of`) is
made of the row's columns alone: `DENY_BODY` builds it with `jsonb_build_object`, field for field
what `Runtime.resume_event` writes (tests/store/test_expiries.py compares the two on the same
request), and `DENY_AUDITS` the audit events `Store._expired` and `Store._resume_events` record. An
`allow` expiry's grant is signed with `COUNTERSIGN_SECRET` over the SHA-256 of the payload's RFC 8785
canonical JSON (`countersign.grant`), which PostgreSQL cannot compute: those rows come back without
their events, for the Python path (`Store._expired`) in the same transaction. SQLite has no
data-modifying CTEs and keeps the Python path for all (`sql.expire_all_due`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, column, insert, literal_column, select, table, text
from sqlalchemy.orm import Session, aliased, load_only
from sqlalchemy.sql.elements import ColumnClause

from ..defaults import RESUME_JOB_PREFIX
from .models import ApprovalRequest, AuditEvent, OutboxEvent, TimeoutResult
from .results import Decided
from .sql import AUDIT_COLUMNS, EXPIRED_COLUMNS, OUTBOX_COLUMNS, expiry_update

EXPIRED = table("expired", *(column(each.name, each.type) for each in ApprovalRequest.__table__.c))
"""The rows the expiry's UPDATE returns (its CTE is named `expired`)."""
EXPIRED_REQUEST = aliased(ApprovalRequest, EXPIRED, adapt_on_names=True)

RETURNED = ("id", "level", "timeout_result", "card_ts", "card_attempts")
"""The columns of an expired request the statement returns: what the sweep logs and checks
(`timeouts._expired`); the decision's columns are in its resume event."""

JOB_ID = f"'{RESUME_JOB_PREFIX}' || expired.id"
"""`jobs.resume_job_id` of an expired row."""

DENY_BODY = (
    "jsonb_build_object("
    "'request_id', expired.id, 'idempotency_key', expired.idempotency_key, 'action', expired.action,"
    " 'outcome', expired.status,"
    " 'payload', COALESCE(NULLIF(expired.approved_payload, 'null'::jsonb), expired.payload),"
    " 'original_payload', expired.payload,"
    " 'edits', COALESCE(NULLIF(expired.edits, 'null'::jsonb), '[]'::jsonb),"
    " 'decided_by', COALESCE(NULLIF(expired.decided_by, 'null'::jsonb), '[]'::jsonb),"
    " 'decided_via', expired.decided_via, 'reason', expired.decision_reason,"
    " 'decided_at', to_char(expired.decided_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
    " 'policy_version', expired.policy_version, 'policy_sha256', expired.policy_sha256,"
    " 'timeout_result', expired.timeout_result, 'grant', NULL)"
)
"""`Decision.to_json()` of an expired row that denies (`decision.decision_of`): `payload` is what
would run (`payload_to_run`), `edits` and `decided_by` are `[]` for None, `decided_at` is
`schema.iso` (microseconds and a `Z`), and there is no grant."""

DENY_AUDITS = f"""
SELECT expired.id AS request_id, a.event, 'policy' AS actor, a.detail
FROM expired CROSS JOIN LATERAL (VALUES
  (1, 'expired', jsonb_build_object(
    'via', 'timeout', 'reason', NULL, 'edits', '[]'::jsonb,
    'result', expired.timeout_result, 'level', expired.level,
    'auto_proceeded', expired.timeout_result = 'allow', 'card_shown', expired.card_ts IS NOT NULL)),
  (2, 'resume_published', CASE
    WHEN expired.resume_webhook <> ''
    THEN jsonb_build_object('job_id', {JOB_ID}, 'webhook', expired.resume_webhook)
    ELSE jsonb_build_object('job_id', {JOB_ID}, 'queue', expired.resume_queue) END)
) AS a(n, event, detail)
WHERE expired.timeout_result = 'deny'
  AND (a.n = 1 OR expired.resume_queue IS NOT NULL OR COALESCE(expired.resume_webhook, '') <> '')
ORDER BY a.n, expired.id
"""
"""The audit events of the expiries that deny, as `Store._expired` (`expired`, by `policy`) and
`Store._resume_events` (`resume_published`, its job id and its queue, or its webhook if it has one;
none for a request without a resume target) record them: all the `expired` first, each request's
before its `resume_published`."""


def expire_all_due_pg(session: Session, limit: int) -> tuple[list[Decided], list[str]]:
    """PostgreSQL: expire up to `limit` due requests as `sql.expire_all_due` does, and, in the same
    statement, insert the resume events (`DENY_BODY`, a webhook's first attempt due now as
    `webhooks.due_now` makes it) and audit events (`DENY_AUDITS`) of those that deny; then read those
    resume events back (by request id, indexed: joining the two CTEs' rows in the statement made
    PostgreSQL compare every pair, not knowing how many rows they hold). Returns the `Decided` of
    those that deny (their request rows hold only `RETURNED`), and the ids of those that `allow`,
    whose resume and audit events are the caller's to write (`Store._expired`)."""
    expired = list(session.scalars(_statement(), {"limit": limit}))
    denied = {row.id: row for row in expired if row.timeout_result == TimeoutResult.DENY}
    allowed = [row.id for row in expired if row.id not in denied]
    if not denied:
        return [], allowed
    events = session.scalars(select(OutboxEvent).where(OutboxEvent.request_id.in_(list(denied))))
    return [Decided(denied[event.request_id], event) for event in events], allowed


def allowed_rows(session: Session, ids: Sequence[str]) -> list[ApprovalRequest]:
    """The just-expired rows `ids` (`expire_all_due_pg`'s `allow`s) with the decision's columns
    (`sql.EXPIRED_COLUMNS`), read again in the expiry's transaction to be signed in Python."""
    if not ids:
        return []
    stmt = (
        select(ApprovalRequest)
        .where(ApprovalRequest.id.in_(ids))
        .options(load_only(*EXPIRED_COLUMNS))
        .execution_options(populate_existing=True)
    )
    return list(session.scalars(stmt))


@functools.cache
def _statement() -> Select[ApprovalRequest]:
    """`WITH expired AS (UPDATE ... RETURNING *), denied AS (INSERT INTO outbox SELECT ... FROM
    expired WHERE deny), audit AS (INSERT INTO audit_events ...) SELECT <RETURNED> FROM expired`,
    built once, its LIMIT bound as `limit`."""
    deny: ColumnClause[bool] = literal_column("expired.timeout_result = 'deny'")
    first_attempt: ColumnClause[Any] = literal_column(
        "CASE WHEN expired.resume_webhook IS NOT NULL THEN CURRENT_TIMESTAMP END"
    )
    outbox_rows = (
        select(
            *(EXPIRED.c.id, EXPIRED.c.resume_queue, EXPIRED.c.resume_func, EXPIRED.c.resume_webhook),
            *(literal_column(JOB_ID), literal_column(DENY_BODY), first_attempt),
        )
        .select_from(EXPIRED)
        .where(deny)
    )
    expired = expiry_update("postgresql").returning(*ApprovalRequest.__table__.c).cte("expired")
    events = insert(OutboxEvent).from_select((*OUTBOX_COLUMNS, "next_attempt_at"), outbox_rows)
    audit_rows = text(DENY_AUDITS).columns(*(column(name) for name in AUDIT_COLUMNS))
    audits = insert(AuditEvent).from_select(AUDIT_COLUMNS, audit_rows)
    returned = [getattr(EXPIRED_REQUEST, name) for name in RETURNED]
    return (
        select(EXPIRED_REQUEST)
        .options(load_only(*returned))
        .add_cte(expired, events.cte("denied"), audits.cte("audit"))
    )
