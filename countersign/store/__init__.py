"""Persistence: the request state machine, audit log, outbox and migrations (the database only)."""

from .engine import SchemaOutOfDate, check_schema, create_db_engine, upgrade
from .models import ApprovalRequest, AuditEvent, DeadLetter, OutboxEvent
from .state import (
    APPROVED,
    EXECUTED,
    FAILED,
    PENDING,
    REJECTED,
    STARTED,
    AlreadyDecided,
    Decided,
    ExecutionRefused,
    Store,
    resume_job_id,
)

__all__ = [
    "APPROVED",
    "EXECUTED",
    "FAILED",
    "PENDING",
    "REJECTED",
    "STARTED",
    "AlreadyDecided",
    "ApprovalRequest",
    "AuditEvent",
    "DeadLetter",
    "Decided",
    "ExecutionRefused",
    "OutboxEvent",
    "SchemaOutOfDate",
    "Store",
    "check_schema",
    "create_db_engine",
    "resume_job_id",
    "upgrade",
]
