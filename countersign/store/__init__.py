"""Persistence: the request state machine, audit log, outbox and migrations (the database only)."""

from .engine import check_schema, create_db_engine, schema_missing, upgrade
from .facts import eligible_approvers
from .models import (
    ApprovalRequest,
    AuditEvent,
    DeadLetter,
    Decider,
    Edit,
    Execution,
    OutboxEvent,
    Outcome,
    OutcomeUnknown,
    ResumeFailed,
    ResumeNotTaken,
    ResumeProblem,
    Status,
    TimeoutResult,
    Via,
    Vote,
    WebhookDeadLettered,
    WebhookFailing,
    may_run,
    standing_problem,
)
from .queries import CardFacts
from .results import AlreadyDecided, Counted, Decided, NotExecutable, Refused, ResumeEvent, TimedOut
from .rows import Event, OutboxRow, Request, RequestRow
from .rules import EditableField, Level, Rules
from .state import Resume, Store
from .webhooks import WebhookAttempt

__all__ = [
    "AlreadyDecided",
    "ApprovalRequest",
    "AuditEvent",
    "CardFacts",
    "Counted",
    "DeadLetter",
    "Decided",
    "Decider",
    "Edit",
    "EditableField",
    "Event",
    "Execution",
    "Level",
    "NotExecutable",
    "OutboxEvent",
    "OutboxRow",
    "Outcome",
    "OutcomeUnknown",
    "Refused",
    "Request",
    "RequestRow",
    "Resume",
    "ResumeEvent",
    "ResumeFailed",
    "ResumeNotTaken",
    "ResumeProblem",
    "Rules",
    "Status",
    "Store",
    "TimedOut",
    "TimeoutResult",
    "Via",
    "Vote",
    "WebhookAttempt",
    "WebhookDeadLettered",
    "WebhookFailing",
    "check_schema",
    "create_db_engine",
    "eligible_approvers",
    "may_run",
    "schema_missing",
    "standing_problem",
    "upgrade",
]
