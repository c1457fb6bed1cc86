"""Persistence: the request state machine, audit log, outbox and migrations (the database only)."""

from .engine import check_schema, create_db_engine, schema_missing, upgrade
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
    eligible_approvers,
    may_run,
)
from .queries import CardFacts
from .results import AlreadyDecided, Counted, Decided, NotExecutable, Refused, ResumeEvent, TimedOut
from .rules import EditableField, Level, Rules
from .sql import standing_problem
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
    "Execution",
    "Level",
    "NotExecutable",
    "OutboxEvent",
    "Outcome",
    "OutcomeUnknown",
    "Refused",
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
