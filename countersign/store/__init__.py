"""Persistence: the request state machine, audit log, outbox and migrations (the database only)."""

from .engine import create_db_engine, upgrade
from .models import ApprovalRequest, AuditEvent, DeadLetter, OutboxEvent
from .state import (
    APPROVED,
    PENDING,
    REJECTED,
    AlreadyDecided,
    Decided,
    Store,
    decision_of,
    resume_job_id,
)

__all__ = [
    "APPROVED",
    "PENDING",
    "REJECTED",
    "AlreadyDecided",
    "ApprovalRequest",
    "AuditEvent",
    "DeadLetter",
    "Decided",
    "OutboxEvent",
    "Store",
    "create_db_engine",
    "decision_of",
    "resume_job_id",
    "upgrade",
]
