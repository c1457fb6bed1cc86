"""Persistence: the request state machine, audit log, outbox and migrations (the database only)."""

from .engine import SchemaOutOfDate, check_schema, create_db_engine, upgrade
from .models import ApprovalRequest, AuditEvent, DeadLetter, OutboxEvent, Vote, eligible_approvers
from .state import (
    APPROVED,
    EXECUTED,
    EXPIRED,
    FAILED,
    PENDING,
    REJECTED,
    STARTED,
    AlreadyDecided,
    Counted,
    Decided,
    ExecutionRefused,
    Refused,
    Store,
    TimedOut,
    resume_job_id,
)

__all__ = [
    "APPROVED",
    "EXECUTED",
    "EXPIRED",
    "FAILED",
    "PENDING",
    "REJECTED",
    "STARTED",
    "AlreadyDecided",
    "ApprovalRequest",
    "AuditEvent",
    "Counted",
    "DeadLetter",
    "Decided",
    "ExecutionRefused",
    "OutboxEvent",
    "Refused",
    "SchemaOutOfDate",
    "Store",
    "TimedOut",
    "Vote",
    "check_schema",
    "create_db_engine",
    "eligible_approvers",
    "resume_job_id",
    "upgrade",
]
