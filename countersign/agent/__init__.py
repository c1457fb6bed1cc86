"""What an agent process imports: ask for approval, then run exactly what was approved, once.

    from countersign.agent import ApprovalClient, approved_action

Nothing here imports Bolt, Alembic or the CEL engine: an agent's RQ worker may import this in
every job.
"""

from ..decision import Decision, Grant
from ..exceptions import (
    CountersignError,
    ExecutionRefused,
    IdempotencyConflict,
    InvalidRequest,
    RequestDeadLettered,
    RouterUnavailable,
    UnknownRequest,
    WaitTimeout,
)
from ..store import Outcome, TimeoutResult, Via
from .async_client import AsyncApprovalClient
from .client import ApprovalClient, RequestState
from .execution import ActionFailed, approved_action, execute_approved, report_outcome

__all__ = [
    "ActionFailed",
    "ApprovalClient",
    "AsyncApprovalClient",
    "CountersignError",
    "Decision",
    "ExecutionRefused",
    "Grant",
    "IdempotencyConflict",
    "InvalidRequest",
    "Outcome",
    "RequestDeadLettered",
    "RequestState",
    "RouterUnavailable",
    "TimeoutResult",
    "UnknownRequest",
    "Via",
    "WaitTimeout",
    "approved_action",
    "execute_approved",
    "report_outcome",
]
