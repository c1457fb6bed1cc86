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
    RouterUnavailable,
    UnknownRequest,
)
from ..store import Outcome, TimeoutResult, Via
from .client import ApprovalClient, RequestState
from .execution import approved_action, execute_approved, report_outcome

__all__ = [
    "ApprovalClient",
    "CountersignError",
    "Decision",
    "ExecutionRefused",
    "Grant",
    "IdempotencyConflict",
    "InvalidRequest",
    "Outcome",
    "RequestState",
    "RouterUnavailable",
    "TimeoutResult",
    "UnknownRequest",
    "Via",
    "approved_action",
    "execute_approved",
    "report_outcome",
]
